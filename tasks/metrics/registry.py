"""The metric registry: every metric in one shape, scored through one door.

A `Metric` says which texts it reads, what it is conditioned on, what it needs from the run (a
`Need`: a record of what follows from it, such as whether the metric reads the evaluation LM, runs
in paper shards, which judging role answers it), whether higher is better, and which family
function scores it. A family function scores every metric of the family it is given in one pass
(GEM's four metrics share one batch of log-likelihood requests; a judge family shares one batch of
LLM calls):

    fn(metrics, candidates, references, negatives, synopses, resources) -> FamilyResult

its SCORES rows (columns a family does not fill, such as the log-probabilities of a judge, are
added as nulls) and any named side tables, which the score stage writes beside the scores without
knowing what they are (review quality's points and matches); with the frames of tasks/core/schema.py
(SCORING_CANDIDATES, REFERENCES, SYNOPSES_WIDE, SCORES). `negatives` are other papers' reviews per
pair for the f-variational estimators (None until a stage draws them). A pair a metric cannot score
gets a NaN score and a `reason`; a metric whose resource is missing fails loudly (`MissingResource`),
since a column of NaN would pass for a result.

Scoring, validation, the leaderboard and the config checks read only this registry. To add a
metric: write (or reuse) a family function in a module of this package, register its metrics there
(`register_family(fn, need, (name, reads, conditioned_on, description), ...)`, or `register(Metric(...))`
for one that differs in more), import the module in `tasks/metrics/__init__.py`, and add a test.
"""

from __future__ import annotations

import contextvars
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
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
    from tasks.metrics.review_quality.work import QualityWork

Reads = Literal["raw", "judgments", "statements"]        # the review text, its judgment lines, atomic statements
# "paper": the paper's full text (PDF), cut to the judge's context at section boundaries (lm_examiner)
Conditioning = Literal["none", "abstract", "abstract+assw", "paper"]
Role = Literal["judge", "oracle", "matcher"]               # the judging roles qualify examines

Loglikelihood = Callable[[pl.DataFrame], pl.DataFrame]   # LOGLIK_REQUESTS -> LOGLIK_RESULTS, keyed by `key`
Embed = Callable[[Sequence[str]], list[np.ndarray]]      # texts -> one (tokens x dim) matrix of unit vectors each
Readout = Callable[[pl.DataFrame], pl.DataFrame]         # ORACLE_REQUESTS -> ORACLE_RESULTS (the eval LM's yes/no readout)
# (system, user) prompts, answers -> (prompts x answers) probabilities of each answer's first token (the eval LM's readout)
AnswerReadout = Callable[[Sequence[tuple[str, str]], Sequence[str]], np.ndarray]
MEMBER_NOTE = "panel_member"   # the `note` of a panel member's own score row, beside the panel's
OraclePredictor = Literal["readout", "generate", "sampled"]   # "sampled": the *_sampled cells' draws


class ChatLM(Protocol):
    """A generation backend as the metrics use it (a `tasks.lm.CachedLM` from `make_lm`): the oracle's
    and the judges' answers, and `cfg` for the price of each call."""

    name: str
    model: str
    cfg: LLMConfig

    def generate(self, requests: Sequence[ChatRequest], accept: Accept | None = None) -> list[ChatResult]: ...


class Seq2Seq(Protocol):
    """A seq2seq model as BARTScore uses it (`Seq2SeqScorer` in tasks/metrics/bartscore.py): s(x -> y),
    the mean log-probability per target token, for many pairs at once."""

    name: str

    def score(self, sources: Sequence[str], targets: Sequence[str]) -> np.ndarray: ...


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
    sampler: ChatLM | None = None               # the sampled oracle cells' backend ([score.oracle] at oracle_temperature)
    oracle_repeats: int = 1                     # its draws per question, averaged (tasks/metrics/panel.py)
    log: LLMLog = field(default_factory=LLMLog, compare=False, repr=False)  # the metrics' LLM usage and answers
    reviser: ChatLM | None = None               # llm_reviser (RevisEval, tasks/metrics/reviseval.py); None: `llm`
    judges: tuple[ChatLM, ...] = ()             # a panel (tasks/metrics/panel.py): used instead of `llm`, averaged
    panel_weights: Mapping[str, float] = field(default_factory=dict)   # Auto-PRE weights, "backend/model" -> w
    readouts: tuple[ReadoutMember, ...] = ()    # a readout oracle panel: used instead of `readout`, averaged
    # review_quality: the run's review-quality work (tasks/metrics/review_quality/work.py): facts the texts do
    # not carry (ratings, decisions, paper texts) and the LLM of points, matching and questions
    quality: QualityWork | None = field(default=None, compare=False, repr=False)
    judge_method: Literal["auto", "generate"] = "auto"   # the judges' rating: readout where possible, or parse
    judge_context_tokens: int = 8192            # the judges' context, for the paper text lm_examiner reads
    pairwise_pairs_per_paper: int = 0           # pairwise_judge: pairs judged per paper (0: all; tasks/metrics/pairwise.py)
    seq2seq: Seq2Seq | None = field(default=None, compare=False, repr=False)   # BARTScore's model
    # where the metrics that run in paper shards go (`Metric.by_paper`): tasks/scoring/metric_shards.py
    # MetricShards in the score and validate stages; None: in this process
    by_paper: PaperShards | None = field(default=None, compare=False, repr=False)

    def provides(self, need: Need) -> bool:
        return need.provided(self)

    def panel(self) -> tuple[ChatLM, ...]:
        """The models of the judging role (judges, the generation oracle): the panel, else `llm` alone."""
        return self.judges or ((self.llm,) if self.llm is not None else ())


@dataclass(frozen=True)
class Need:
    """What a metric needs from the run, and what follows from it: whether this run provides it, whether
    the metric is scored once per evaluation LM or in paper shards, which judging role answers it, how the
    leaderboard names its predictor and what to set when it is missing."""

    name: str
    provided: Callable[[Resources], bool] = field(compare=False, repr=False)
    prefix: str | None = None       # the predictor: "<prefix>:<eval_lm>"; "": the eval_lm itself; None: "none"
    reads_eval_lm: bool = False     # scored once per evaluation LM of [score] eval_lms (tasks/scoring/eval_lms.py)
    sharded: bool = False           # behind an LLM: scored in resumable paper shards (tasks/scoring/metric_shards.py)
    role: Role | None = None        # the judging role qualify examines for it (tasks/stages/qualify)
    hint: str = ""                  # what MissingResource asks for; "": the need's name

    def predictor(self, eval_lm: str | None) -> str:
        """Which model produced a score row with this `eval_lm`: `<prefix>:<eval_lm>`, an eval_lm that names
        its predictor already (a readout panel's `readout:...`, the oracle cells' `readout:` or `generate:`)
        as it is, or `none`."""
        if self.prefix is None:
            return "none"
        lm = eval_lm or ""
        return lm if not self.prefix or lm.startswith(f"{self.prefix}:") else f"{self.prefix}:{lm}"


def _readout(r: Resources) -> bool:
    return r.readout is not None and r.eval_lm is not None


def _llm(r: Resources) -> bool:
    return r.llm is not None or bool(r.judges)


NOTHING = Need("nothing", lambda r: True)
LM_LOGPROBS = Need("lm_logprobs", lambda r: r.loglikelihood is not None and r.eval_lm is not None, "logprobs",
                   reads_eval_lm=True)
LM_READOUT = Need("lm_readout", _readout, "readout", reads_eval_lm=True)
EMBEDDING = Need("embedding", lambda r: r.embed is not None, "embedding")
LLM_ORACLE = Need("llm_oracle", lambda r: (_readout(r) or bool(r.readouts)) if r.oracle == "readout" else _llm(r),
                  "", sharded=True, role="oracle")
LLM_SAMPLED = Need("llm_sampled_oracle", lambda r: r.sampler is not None, "", sharded=True,
                   hint="the [score.oracle] backend at [score] oracle_temperature: a run with an LLM cache folder")
LLM_JUDGE = Need("llm_judge", _llm, "judge", sharded=True, role="judge")
LLM_REVISER = Need("llm_reviser", lambda r: r.reviser is not None or r.llm is not None, "reviser", sharded=True)
REVIEW_QUALITY = Need("review_quality", lambda r: r.quality is not None, "review_quality", sharded=True)
SEQ2SEQ = Need("seq2seq", lambda r: r.seq2seq is not None, "seq2seq",
               hint="a seq2seq model and none is installed: set [score] bartscore_model to a folder or id of one "
                    "(e.g. facebook/bart-large-cnn)")
NEEDS = {n.name: n for n in (NOTHING, LM_LOGPROBS, LM_READOUT, EMBEDDING, LLM_ORACLE, LLM_SAMPLED, LLM_JUDGE, LLM_REVISER,
                             REVIEW_QUALITY, SEQ2SEQ)}


@dataclass(frozen=True)
class FamilyResult:
    """What a family function leaves: its SCORES rows, and named side tables the score stage writes beside
    them (`<name>.parquet`) with counts for the stage summary."""

    scores: pl.DataFrame
    tables: Mapping[str, pl.DataFrame] = field(default_factory=dict)
    counts: Mapping[str, int] = field(default_factory=dict)


def scores_frame(rows: Sequence[Mapping[str, object]]) -> pl.DataFrame:
    """A family's SCORES rows as one frame in the one order (metric, paper, candidate, reference); the
    empty frame when there are none."""
    frame = pl.DataFrame(rows, schema={**SCORES}) if rows else pl.DataFrame(schema=SCORES)
    return frame.select(SCORES.names()).sort("metric", "paper_id", "candidate", "reference")


def merge_results(parts: Sequence[FamilyResult]) -> FamilyResult:
    """One result of several (families, evaluation LMs, paper shards): scores concatenated, each side table's
    rows concatenated and kept once (two calls that read the same review leave its points twice), counts summed."""
    tables: dict[str, list[pl.DataFrame]] = {}
    counts: Counter = Counter()
    for part in parts:
        for name, frame in part.tables.items():
            if frame.width:
                tables.setdefault(name, []).append(frame)
        counts.update(part.counts)
    scores = pl.concat([conform(p.scores, SCORES) for p in parts]) if parts else pl.DataFrame(schema=SCORES)
    return FamilyResult(scores, {name: pl.concat(frames, how="diagonal_relaxed").unique(maintain_order=True)
                                 for name, frames in tables.items()}, dict(counts))


class FamilyFn(Protocol):
    def __call__(self, metrics: Sequence[Metric], candidates: pl.DataFrame, references: pl.DataFrame,
                 negatives: pl.DataFrame | None, synopses: pl.DataFrame, resources: Resources) -> FamilyResult: ...


class PaperShards(Protocol):
    """Scores metrics as resumable paper shards, each with Resources of its own, and adds their LLM calls to
    `resources.log` (tasks/scoring/metric_shards.py MetricShards)."""

    def __call__(self, metrics: Sequence[Metric], candidates: pl.DataFrame, references: pl.DataFrame,
                 synopses: pl.DataFrame, negatives: pl.DataFrame | None, resources: Resources) -> FamilyResult: ...

    @property
    def beside(self) -> bool:
        """Whether the shards may run beside the other families (in a thread of their own), because the
        evaluation LM takes more than one scoring task at once."""
        ...

    def take_ahead(self) -> None:
        """Before they start beside the other families: hold a slot for the shards' first task, so the
        families' own tasks cannot take every slot first (freed by the call if none needs it)."""
        ...


# frames with a paper_id column that a family reads besides its inputs (review quality's ratings, decisions
# and paper texts): a paper shard's name hashes its papers' rows of them
Facts = Callable[[Resources], Sequence[pl.DataFrame]]


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
    whole_run: bool = False         # reads every paper at once (a model's distribution): never cut into paper shards
    facts: Facts | None = field(default=None, compare=False, repr=False)
    role: Role | None = None        # the judging role behind its scores where not its need's (points_*: the matcher)
    # whether a score reads the human references (False: the paper, its synopsis or the candidate alone); a score row
    # with a null reference of a metric that reads them read all of the paper's references at once
    reads_references: bool = True
    # compares the models' candidates of a paper with each other (the pairwise judge): its paper shards hold
    # every model's candidates of their papers, where the others' hold one model's each
    across_models: bool = False

    @property
    def judging_role(self) -> Role | None:
        """The role qualify examines for this metric's scores, and the leaderboard's `qualified` flag reads."""
        return self.role or self.needs.role

    @property
    def by_paper(self) -> bool:
        """Scored in paper shards where the run has them: behind an LLM, one paper at a time."""
        return self.needs.sharded and not self.whole_run


class MissingResource(RuntimeError):
    """A metric was asked for but the run does not provide what it needs."""


REGISTRY: dict[str, Metric] = {}


def register(*metrics: Metric) -> None:
    for metric in metrics:
        if metric.name in REGISTRY:
            raise ValueError(f"metric {metric.name!r} is registered twice")
        REGISTRY[metric.name] = metric


Entry = tuple[str, Reads, Conditioning, str]   # a metric of a family: name, reads, conditioned_on, description


def register_family(fn: FamilyFn, needs: Need, *entries: Entry, higher_is_better: bool = True, **shared: Any) -> None:
    """Register the metrics one family function scores: what they share (the function, the need, the
    direction, any other `Metric` field such as `negatives`) given once, then one entry per metric."""
    register(*(Metric(name, reads, conditioned_on, needs, higher_is_better, description, fn, **shared)
               for name, reads, conditioned_on, description in entries))


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


def score_with_tables(names: Sequence[str], candidates: pl.DataFrame, references: pl.DataFrame,
                      synopses: pl.DataFrame, resources: Resources, negatives: pl.DataFrame | None = None) -> FamilyResult:
    """Every metric named, with the families' side tables: each family scored once, families in the order
    first named, then the metrics that run in paper shards when the run has them (`resources.by_paper`;
    the same rows as in this process)."""
    metrics = get(list(dict.fromkeys(names)))
    _check_resources(metrics, resources)
    sharded = [m for m in metrics if m.by_paper] if resources.by_paper is not None else []
    families: dict[int, list[Metric]] = {}
    for metric in metrics:
        if metric not in sharded:
            families.setdefault(id(metric.fn), []).append(metric)
    by_paper = resources.by_paper
    together = bool(sharded) and by_paper is not None and by_paper.beside
    with ThreadPoolExecutor(1, thread_name_prefix="paper-shards") as beside, _cores_split(together):
        later = None
        if together:
            by_paper.take_ahead()
            # in the run's context (its Prefect flow is the shards' parent), while the families score here
            later = beside.submit(contextvars.copy_context().run, _in_shards, by_paper, sharded, candidates,
                                  references, synopses, negatives, resources)
        parts = [group[0].fn(group, candidates, references, negatives, synopses, resources)
                 for group in families.values()]
        if later is not None:
            parts.append(later.result())
        elif sharded and by_paper is not None:
            parts.append(_in_shards(by_paper, sharded, candidates, references, synopses, negatives, resources))
    return merge_results(parts)


def _in_shards(by_paper: PaperShards, sharded: Sequence[Metric], candidates: pl.DataFrame, references: pl.DataFrame,
               synopses: pl.DataFrame, negatives: pl.DataFrame | None, resources: Resources) -> FamilyResult:
    """The sharded metrics through `by_paper`: those of one model's candidates at a time in one call, those
    that compare the models of a paper (`across_models`) in another, whose shards hold every model."""
    groups = [[m for m in sharded if not m.across_models], [m for m in sharded if m.across_models]]
    return merge_results([by_paper(group, candidates, references, synopses, negatives, resources)
                          for group in groups if group])


def _cores_split(together: bool) -> AbstractContextManager[None]:
    """The local models' cores split in two (tasks/lm/local.py `sharing_cores`) while the shards run beside."""
    if not together:
        return nullcontext()
    from tasks.lm.local import sharing_cores

    return sharing_cores(2)


def score_metrics(names: Sequence[str], candidates: pl.DataFrame, references: pl.DataFrame, synopses: pl.DataFrame,
                  resources: Resources, negatives: pl.DataFrame | None = None) -> pl.DataFrame:
    """SCORES rows of every metric named (`score_with_tables` less the side tables)."""
    return score_with_tables(names, candidates, references, synopses, resources, negatives).scores


def _check_resources(metrics: Sequence[Metric], resources: Resources) -> None:
    missing = [f"{m.name} needs {m.needs.hint or m.needs.name}" for m in metrics if not resources.provides(m.needs)]
    if missing:
        raise MissingResource(f"this run cannot score {'; '.join(missing)}")


def predictor(metric: str, eval_lm: str | None) -> str:
    """Which model produced a metric's scores (`Need.predictor`): `logprobs:<eval LM>`, `readout:<eval LM>`,
    `generate:<backend>/<model>` (the oracle cells name their predictor in eval_lm), `judge:<backend>/<model>`,
    `embedding:<model>`, or `none`."""
    return REGISTRY[metric].needs.predictor(eval_lm) if metric in REGISTRY else "none"


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
