"""The metric registry: every metric in one shape, scored through one door.

A `Metric` says which texts it reads, what it is conditioned on, what it needs from the run
(`Resources`), whether higher is better, and which family function scores it. A family function
scores every metric of the family it is given in one pass (GEM's four metrics share one batch of
log-likelihood requests; a judge family would share one batch of LLM calls):

    fn(metrics, candidates, references, negatives, synopses, resources) -> SCORES rows

(columns a family does not fill, such as the log-probabilities of a judge, are added as nulls)
with the frames of tasks/core/schema.py (SCORING_CANDIDATES, REFERENCES, SYNOPSES_WIDE, SCORES);
`negatives` are other papers' reviews per pair for the f-variational estimators (None until a
stage draws them). A pair a metric cannot score gets a NaN score and a `reason`; a metric whose
resource is missing fails loudly (`MissingResource`), since a column of NaN would pass for a result.

Scoring, validation, the leaderboard and the config checks read only this registry. To add a
metric: write (or reuse) a family function in a module of this package, `register(Metric(...))`
there, import the module in `tasks/metrics/__init__.py`, and add a test.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
import polars as pl

from tasks.core.frames import reference_sets, usable  # noqa: F401  (the families read them from here)
from tasks.core.schema import SCORES, conform
from tasks.metrics.llm_log import LLMLog

if TYPE_CHECKING:
    from tasks.core.config import LLMConfig
    from tasks.lm.types import Accept, ChatRequest, ChatResult

Reads = Literal["raw", "judgments", "statements"]        # the review text, its judgment lines, atomic statements
# "paper": the paper's full text (PDF), cut to the judge's context at section boundaries (lm_examiner)
Conditioning = Literal["none", "abstract", "abstract+assw", "paper"]
Need = Literal["lm_logprobs", "llm_oracle", "llm_judge", "embedding", "nothing", "lm_readout", "llm_reviser",
               "review_quality", "seq2seq"]

Loglikelihood = Callable[[pl.DataFrame], pl.DataFrame]   # LOGLIK_REQUESTS -> LOGLIK_RESULTS, keyed by `key`
Embed = Callable[[Sequence[str]], list[np.ndarray]]      # texts -> one (tokens x dim) matrix of unit vectors each
Readout = Callable[[pl.DataFrame], pl.DataFrame]         # ORACLE_REQUESTS -> ORACLE_RESULTS (the eval LM's yes/no readout)
# (system, user) prompts, answers -> (prompts x answers) probabilities of each answer's first token (the eval LM's readout)
AnswerReadout = Callable[[Sequence[tuple[str, str]], Sequence[str]], np.ndarray]
OraclePredictor = Literal["readout", "generate"]


class ChatLM(Protocol):
    """A generation backend as the metrics use it (a `tasks.lm.CachedLM` from `make_lm`): the oracle's
    and the judges' answers, and `cfg` for the price of each call."""

    name: str
    model: str
    cfg: LLMConfig

    def generate(self, requests: Sequence[ChatRequest], accept: Accept | None = None) -> list[ChatResult]: ...


@dataclass(frozen=True)
class ReadoutMember:
    """One local LM of a logit-readout oracle panel (tasks/metrics/readout_panel.py)."""

    key: str                    # its resolved spec's key, as the predictor column names it
    readout: Readout            # yes/no readout
    read_answers: AnswerReadout  # readout over any answers (the support bins)


@dataclass(frozen=True)
class Resources:
    """What a run provides to the metrics; a field left None is not available in this run."""

    eval_lm: str | None = None                  # key of the evaluation LM, part of request keys and score rows
    loglikelihood: Loglikelihood | None = None  # lm_logprobs
    embed: Embed | None = None                  # embedding
    embed_model: str | None = None              # the embedding model's name, written into score rows
    llm: ChatLM | None = None                   # llm_judge, and llm_oracle when `oracle` is "generate"
    readout: Readout | None = None              # lm_readout: yes/no oracle read from the evaluation LM's logits
    read_answers: AnswerReadout | None = None   # the same readout over any answers (the oracle's support bins)
    oracle: OraclePredictor = "readout"         # what answers the llm_oracle cells: the readout or `llm`
    log: LLMLog = field(default_factory=LLMLog, compare=False, repr=False)  # the metrics' LLM usage and answers
    reviser: ChatLM | None = None               # llm_reviser (RevisEval, tasks/metrics/reviseval.py); None: `llm`
    judges: tuple[ChatLM, ...] = ()             # a panel (tasks/metrics/panel.py): used instead of `llm`, averaged
    panel_weights: Mapping[str, float] = field(default_factory=dict)   # Auto-PRE weights, "backend/model" -> w
    readouts: tuple[ReadoutMember, ...] = ()    # a readout oracle panel: used instead of `readout`, averaged
    # review_quality: the run's review-quality work (tasks/metrics/review_quality/work.py QualityWork): facts the
    # texts do not carry (ratings, decisions, paper texts) and the LLM of points, matching and questions
    quality: Any = field(default=None, compare=False, repr=False)
    judge_method: Literal["auto", "generate"] = "auto"   # the judges' rating: readout where possible, or parse
    judge_context_tokens: int = 8192            # the judges' context, for the paper text lm_examiner reads
    seq2seq: Any = field(default=None, compare=False, repr=False)   # BARTScore's model (tasks/metrics/bartscore.py)
    # the metrics behind an LLM scored as resumable paper shards (tasks/scoring/metric_shards.py MetricShards) by
    # validation's rescoring (tasks/stages/validate/rescore.py); None: in this process
    by_paper: Any = field(default=None, compare=False, repr=False)

    def provides(self, need: Need) -> bool:
        readout = self.readout is not None and self.eval_lm is not None
        oracle_readout = readout or bool(self.readouts)
        llm = self.llm is not None or bool(self.judges)
        return {"nothing": True, "lm_logprobs": self.loglikelihood is not None and self.eval_lm is not None,
                "embedding": self.embed is not None,
                "llm_oracle": oracle_readout if self.oracle == "readout" else llm,
                "llm_judge": llm, "lm_readout": readout,
                "llm_reviser": self.reviser is not None or self.llm is not None,
                "review_quality": self.quality is not None, "seq2seq": self.seq2seq is not None}[need]

    def panel(self) -> tuple[ChatLM, ...]:
        """The models of the judging role (judges, the generation oracle): the panel, else `llm` alone."""
        return self.judges or ((self.llm,) if self.llm is not None else ())


class FamilyFn(Protocol):
    def __call__(self, metrics: Sequence[Metric], candidates: pl.DataFrame, references: pl.DataFrame,
                 negatives: pl.DataFrame | None, synopses: pl.DataFrame, resources: Resources) -> pl.DataFrame: ...


@dataclass(frozen=True)
class Metric:
    """One metric; the metrics that share a family function `fn` are scored together in one pass."""

    name: str                       # the name in config, score rows and the leaderboard
    reads: Reads                    # which text of candidate and reference it compares
    conditioned_on: Conditioning    # which synopsis of the paper it is conditioned on
    needs: Need                     # what it needs from Resources
    higher_is_better: bool          # the direction of validation tests and leaderboard ranks
    description: str
    fn: FamilyFn = field(compare=False, repr=False)
    negatives: bool = False         # reads negative references (other papers' reviews) per pair


NEED_HINTS = {"seq2seq": "a seq2seq model and none is installed: set [score] bartscore_model to a folder or id "
                         "of one (e.g. facebook/bart-large-cnn)"}


class MissingResource(RuntimeError):
    """A metric was asked for but the run does not provide what it needs."""


REGISTRY: dict[str, Metric] = {}


def register(*metrics: Metric) -> None:
    for metric in metrics:
        if metric.name in REGISTRY:
            raise ValueError(f"metric {metric.name!r} is registered twice")
        REGISTRY[metric.name] = metric


def check_names(names: Sequence[str]) -> tuple[str, ...]:
    """The names, if every one is a registered metric and there is at least one; else a clear error."""
    unknown = [n for n in names if n not in REGISTRY]
    if unknown or not names:
        raise ValueError(f"unknown metric(s) {unknown}; known: {sorted(REGISTRY)}")
    return tuple(names)


def get(names: Sequence[str]) -> list[Metric]:
    return [REGISTRY[n] for n in check_names(names)]


def higher_is_better(names: Sequence[str]) -> dict[str, bool]:
    return {m.name: m.higher_is_better for m in get(list(dict.fromkeys(names)))}


def score_metrics(names: Sequence[str], candidates: pl.DataFrame, references: pl.DataFrame, synopses: pl.DataFrame,
                  resources: Resources, negatives: pl.DataFrame | None = None) -> pl.DataFrame:
    """SCORES rows of every metric named: each family scored once, families in the order first named."""
    metrics = get(list(dict.fromkeys(names)))
    _check_resources(metrics, resources)
    families: dict[int, list[Metric]] = {}
    for metric in metrics:
        families.setdefault(id(metric.fn), []).append(metric)
    parts = [group[0].fn(group, candidates, references, negatives, synopses, resources) for group in families.values()]
    return pl.concat([conform(p, SCORES) for p in parts]) if parts else pl.DataFrame(schema=SCORES)


def _check_resources(metrics: Sequence[Metric], resources: Resources) -> None:
    missing = [f"{m.name} needs {NEED_HINTS.get(m.needs, m.needs)}" for m in metrics if not resources.provides(m.needs)]
    if missing:
        raise MissingResource(f"this run cannot score {'; '.join(missing)}")


def predictor(metric: str, eval_lm: str | None) -> str:
    """Which model produced a metric's scores, from its need and the `eval_lm` of its score rows:
    `logprobs:<eval LM>`, `readout:<eval LM>`, `generate:<backend>/<model>` (the oracle cells name their
    predictor in eval_lm), `judge:<backend>/<model>`, `embedding:<model>`, or `none`."""
    need = REGISTRY[metric].needs if metric in REGISTRY else None
    lm = eval_lm or ""
    if need == "llm_oracle" or (need == "lm_readout" and lm.startswith("readout:")):
        return lm
    prefix = {"lm_logprobs": "logprobs", "lm_readout": "readout", "llm_judge": "judge", "embedding": "embedding",
              "llm_reviser": "reviser", "review_quality": "review_quality", "seq2seq": "seq2seq"}
    return f"{prefix[need]}:{lm}" if need in prefix else "none"


def candidate_scores(scores: pl.DataFrame) -> pl.DataFrame:
    """CANDIDATE_SCORES (tasks/core/schema.py): a candidate's score on its paper, the mean over its references (NaN pairs left out)."""
    valid = pl.col("score").is_not_nan() & pl.col("score").is_not_null()
    return (
        scores.group_by("paper_id", "candidate", "source", "metric", "eval_lm")
        .agg(
            pl.col("score").filter(valid).mean().fill_null(math.nan).alias("score"),
            valid.sum().cast(pl.Int64).alias("n_references"),
            pl.when(valid.any()).then(pl.lit(None, pl.String))
            .otherwise(pl.col("reason").drop_nulls().first()).alias("reason"),
        )
        .sort("metric", "paper_id", "candidate")
    )
