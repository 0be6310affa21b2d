"""The validation workflow (GEM paper Algorithm 1): perturb candidates, rescore them, test each metric.

Input: one row per human review (the REVIEWS_IN schema): paper_id, review_id, review_text and
optionally judgments (preprocessed, one per line), abstract, assw, a human quality score and a
group (random replacement draws within it). Per paper one seeded review (or every review, with
candidates="all") is the candidate; the paper's other reviews are its references.

1. Each strategy perturbs every candidate. Deterministic strategies run here; when the reviews carry
   judgments they act on the judgment lines too (so judgment metrics need no LLM); LLM strategies
   rewrite the raw review through the backend (cached), and the result is preprocessed into
   judgments when a metric needs them. A failed perturbation keeps a None text and its error.
2. Original and perturbed candidates are scored against the same references by the metric registry
   (tasks/metrics), with whatever the metrics need from `resources` (the evaluation LM, MiniLM).
3. `stats.validation_table` tests each (metric, strategy); `human_correlation` relates the original
   scores to the quality score where the data has one (then every review is scored as a candidate).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import polars as pl

from tasks.core import schema
from tasks.core.config import ValidateConfig
from tasks.core.frames import judgments_text
from tasks.core.schema import REFERENCES, SCORING_CANDIDATES, SYNOPSES_WIDE, conform
from tasks.metrics import Resources, check_names, get, higher_is_better
from tasks.stages.validate.adversary import ADVERSARY, largest_inflation, run_adversary
from tasks.stages.validate.llm_perturb import apply_llm_perturbation
from tasks.stages.validate.perturb import random_replacement
from tasks.stages.validate.rescore import PERTURBATIONS, SEPARATOR, score_candidates
from tasks.stages.validate.review_data import VALIDATION_DATA
from tasks.stages.validate.stats import (
    LENGTH_CONFOUND,
    length_confound,
    spearman,
    validation_table,
    word_count,
)
from tasks.stages.validate.strategies import STRATEGIES, perturb_texts, perturber, strategy

REVIEWS_IN = pl.Schema({"paper_id": pl.String, "review_id": pl.String, "review_text": pl.String,
                        "judgments": pl.String, "abstract": pl.String, "assw": pl.String,
                        "quality": pl.Float64, "group": pl.String,
                        "assw_source": pl.String, "paper_text": pl.String})   # as in SYNOPSES_WIDE
HUMAN_CORRELATION = pl.Schema({"metric": pl.String, "eval_lm": pl.String, "n": pl.Int64, "n_dropped": pl.Int64,
                               "rho": pl.Float64, "p_value": pl.Float64, "reason": pl.String})
RAW_SUFFIX = "@raw"  # a deterministic strategy run again on the raw review when both levels run
Level = Literal["raw", "judgments"]

Preprocessor = Callable[[pl.DataFrame], tuple[pl.DataFrame, pl.DataFrame]]  # reviews -> (judgments, rejects)


@dataclass
class ValidationResult:
    validation: pl.DataFrame          # stats.VALIDATION_COLUMNS, one row per (metric, strategy)
    human_correlation: pl.DataFrame   # HUMAN_CORRELATION, empty without quality scores
    scores: pl.DataFrame              # candidate scores of original and perturbed candidates
    pairs: pl.DataFrame               # metric, strategy, kind, paper_id, candidate, original, perturbed
    perturbations: pl.DataFrame       # PERTURBATIONS
    rejects: pl.DataFrame             # schema.REJECTS, stage "validate"
    stats: dict[str, Any] = field(default_factory=dict)
    length_confound: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=LENGTH_CONFOUND))
    adversary: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=ADVERSARY))
    data: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=VALIDATION_DATA))   # provenance


def _usable(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _reject(rule: str, entity: str, entity_id: str | None, paper_id: str | None, detail: str) -> dict[str, Any]:
    return {"stage": "validate", "entity": entity, "entity_id": entity_id, "paper_id": paper_id,
            "rule": rule, "detail": detail}


# ---------------------------------------------------------------- input and sample

def prepare(reviews: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The reviews in REVIEWS_IN (absent optional columns as nulls) and the rejects of unusable rows.

    A row is unusable without a paper_id or review_id, with an empty review text or a review_id
    that repeats. Missing required columns are an error.
    """
    missing = [c for c in ("paper_id", "review_id", "review_text") if c not in reviews.columns]
    if missing:
        raise ValueError(f"reviews lack column(s) {missing}")
    frame = reviews.select(pl.col(c).cast(t) if c in reviews.columns else pl.lit(None, t).alias(c)
                           for c, t in REVIEWS_IN.items())
    bad: list[dict[str, Any]] = []
    seen: set[str] = set()
    keep: list[bool] = []
    for row in frame.iter_rows(named=True):
        rid, pid = row["review_id"], row["paper_id"]
        rule = ("missing_paper_id" if not _usable(pid) else "missing_review_id" if not _usable(rid)
                else "empty_review" if not _usable(row["review_text"]) else "duplicate_review_id" if rid in seen
                else None)
        keep.append(rule is None)
        if rule:
            bad.append(_reject(rule, "review", rid, pid, rule.replace("_", " ")))
        elif rid:
            seen.add(rid)
    return frame.filter(pl.Series(keep, dtype=pl.Boolean)), schema.rejects(bad)


def sample(reviews: pl.DataFrame, max_papers: int, candidates: Literal["one", "all"], seed: int) -> pl.DataFrame:
    """At most `max_papers` papers (seeded draw) with an `is_candidate` flag: one seeded review per paper or all."""
    rng = np.random.default_rng(seed)
    papers = sorted(reviews["paper_id"].unique().to_list())
    if len(papers) > max_papers:
        papers = sorted(rng.choice(papers, size=max_papers, replace=False).tolist())
    frame = reviews.filter(pl.col("paper_id").is_in(papers)).sort("paper_id", "review_id")
    if candidates == "all":
        return frame.with_columns(is_candidate=pl.lit(True))
    chosen = {pid: ids[int(rng.integers(len(ids)))] for pid, ids in
              frame.group_by("paper_id", maintain_order=True).agg("review_id").iter_rows()}
    return frame.with_columns(is_candidate=pl.col("review_id").is_in(list(chosen.values())))


# ---------------------------------------------------------------- perturbations

def _donors(frame: pl.DataFrame, seed: int, need_judgments: bool) -> list[int | None]:
    """For each row, the row index of a review of another paper of the same group (or None)."""
    ok = [i for i, row in enumerate(frame.iter_rows(named=True))
          if not need_judgments or _usable(row["judgments"])]
    drawn = random_replacement([frame["paper_id"][i] for i in ok], [str(i) for i in ok], seed=seed,
                               groups=[frame["group"][i] or "" for i in ok])
    out: list[int | None] = [None] * frame.height
    for i, donor in zip(ok, drawn, strict=True):
        out[i] = None if donor is None else int(donor)
    return out


def perturb_candidates(
    frame: pl.DataFrame,
    strategies: Sequence[str],
    *,
    judgment_lines: bool,
    backend: Any = None,
    seed: int = 0,
    suffix: str = "",
    backends: Mapping[str, Any] | None = None,
    rewrite_lines: bool = False,
    beside: Any = None,
) -> pl.DataFrame:
    """PERTURBATIONS of the rows flagged is_candidate, one row per (candidate, strategy).

    `judgment_lines`: the deterministic strategies also perturb the judgments column (level
    "judgments"; else the perturbed judgments stay null until `fill_judgments` preprocesses the
    perturbed review: level "raw"). LLM strategies need `backend` and rewrite the raw review (level
    "raw"); with `rewrite_lines`, a strategy that rewrites judgments (`Strategy.rewrites_judgments`, GEM
    appendix D.2.1) also rewrites the candidate's judgment lines, which the judgment metrics then read
    (level "judgments"). Random replacement takes the donor review's own judgments whenever it has them.
    `suffix` is appended to the candidate ids; `backends` names a backend for some strategies
    (a second rephraser, say) in place of `backend`. `beside`: a second backend of the same local model;
    the LLM strategies then rewrite in two lanes side by side, on half the cores each (`rewrite_in_lanes`).
    """
    cand = frame.filter("is_candidate")
    idx = [i for i, c in enumerate(frame["is_candidate"].to_list()) if c]
    llm_names = [name for name in strategies if strategy(name).needs_llm]
    rewritten = rewrite_in_lanes(llm_names, cand, backend, backends or {}, beside, rewrite_lines)
    rows: list[dict[str, Any]] = []
    for name in strategies:
        spec = strategy(name)
        texts: list[str | None]
        lines: list[str | None] = [None] * cand.height
        errors: list[str | None]
        if name == "random_replacement":
            donors = _donors(frame, seed, judgment_lines)
            picked = [donors[i] for i in idx]
            texts = [None if d is None else frame["review_text"][d] for d in picked]
            lines = [None if d is None else frame["judgments"][d] for d in picked]
            errors = [None if d is not None else "no review of another paper in the group" for d in picked]
        elif not spec.needs_llm:
            texts, errors = perturb_texts(name, cand["review_text"].to_list(), target="review")
            if judgment_lines:
                lines, line_errors = perturb_texts(name, cand["judgments"].to_list(), target="judgments")
                errors = [e or (f"judgments: {j}" if j else None) for e, j in zip(errors, line_errors, strict=True)]
        else:
            texts, new_lines, errors = rewritten[name]
            lines = new_lines if new_lines is not None else lines
        on_lines = (judgment_lines and not spec.needs_llm) or (rewrite_lines and spec.rewrites_judgments)
        for row, text, line, error in zip(cand.iter_rows(named=True), texts, lines, errors, strict=True):
            rows.append({"paper_id": row["paper_id"], "review_id": row["review_id"],
                         "candidate": f"{row['review_id']}{SEPARATOR}{name}{suffix}", "strategy": name,
                         "kind": spec.kind, "review_text": text if error is None else None,
                         "judgments": line if error is None else None, "error": error,
                         "level": "judgments" if on_lines else "raw"})
    return pl.DataFrame(rows, schema=PERTURBATIONS) if rows else pl.DataFrame(schema=PERTURBATIONS)


Rewrite = tuple[list[str | None], list[str | None] | None, list[str | None]]   # texts, lines (or None), errors


def rewrite_in_lanes(names: Sequence[str], cand: pl.DataFrame, backend: Any, backends: Mapping[str, Any],
                     beside: Any, rewrite_lines: bool) -> dict[str, Rewrite]:
    """Each LLM strategy's rewrites of the candidates. With `beside` (a second backend of the same local
    model), the rewrites on `backend` run in two lanes side by side, each local call on half the cores
    (tasks/lm/local.py `in_lanes`): a decoding step is small and gains little from a second core, so two
    batches on one core each decode more than one on two. The work is cut into jobs of one strategy, one
    target (the review, or the judgment lines a rephraser also rewrites) and one part of the candidates
    (`lane_parts`: a batch at most), which a free lane takes in turn; a job is calls of its own on one
    instance of the model with one core, so its answers are the same whichever lane ran it. Without
    `beside`, each strategy and target is one call over every candidate."""
    from tasks.lm.local import in_lanes, lane_parts

    reviews, lines, abstracts = cand["review_text"].to_list(), cand["judgments"].to_list(), cand["abstract"].to_list()
    Job = tuple[str, str, range]     # strategy, target, the candidates' part

    def rewrite(job: Job, llm: Any) -> list[Any]:
        name, target, part = job
        if llm is None:
            raise ValueError(f"strategy {name} needs an LLM backend")
        if target == "judgments":
            return apply_llm_perturbation(name, lines[part.start:part.stop], llm, target="judgments")
        return apply_llm_perturbation(name, reviews[part.start:part.stop], llm,
                                      abstracts=abstracts[part.start:part.stop])

    def jobs(name: str, parts: list[range]) -> list[Job]:
        targets = ["review"] + (["judgments"] if rewrite_lines and strategy(name).rewrites_judgments else [])
        return [(name, target, part) for target in targets for part in parts]

    whole = [range(cand.height)]
    lanes = [backend] if beside is None else [backend, beside]
    batch = getattr(getattr(backend, "cfg", None), "batch_size", None) or max(1, cand.height)
    split = lane_parts(cand.height, len(lanes), batch) if beside is not None else whole
    parts = {name: whole if name in backends else split for name in names}
    done = {job: rewrite(job, backends[name]) for name in names if name in backends for job in jobs(name, whole)}
    todo = [job for name in names if name not in backends for job in jobs(name, split)]
    done |= dict(zip(todo, in_lanes(todo, lanes, rewrite, "rewrite-lane"), strict=True))
    found: dict[str, Rewrite] = {}
    for name in names:
        rows = [p for part in parts[name] for p in done[(name, "review", part)]]
        texts, errors = [p.text for p in rows], [p.error for p in rows]
        new_lines = None
        if rewrite_lines and strategy(name).rewrites_judgments:
            redone = [p for part in parts[name] for p in done[(name, "judgments", part)]]
            new_lines = [p.text for p in redone]
            errors = [e or (f"judgments: {p.error}" if p.error else None) for e, p in zip(errors, redone, strict=True)]
        found[name] = (texts, new_lines, errors)
    return found


def unusable_words(errors: pl.Series, total: int) -> str:
    """'k of N perturbations unusable (error: count, ...)', the two commonest errors named."""
    counts = errors.drop_nulls().value_counts(sort=True).rows()
    named = ", ".join(f"{error}: {count}" for error, count in counts[:2]) + (", ..." if len(counts) > 2 else "")
    return f"{errors.drop_nulls().len()} of {total} perturbations unusable ({named})"


def with_unusable_perturbations(table: pl.DataFrame, perturbed: pl.DataFrame) -> pl.DataFrame:
    """The validation table with each strategy's failed perturbations said: a row's `reason` counts them (an
    LLM rewrite refused or cut off, say), so a row with too few pairs says why it has them."""
    if perturbed.is_empty():
        return table
    said = {name: unusable_words(group["error"], group.height)
            for (name,), group in perturbed.group_by("strategy", maintain_order=True)
            if group["error"].is_not_null().any()}
    if not said:
        return table
    return table.with_columns(reason=pl.when(pl.col("strategy").is_in(list(said))).then(
        pl.concat_str(pl.col("reason"), pl.col("strategy").replace_strict(said, default=None), separator="; ",
                      ignore_nulls=True)).otherwise("reason"))


def fill_judgments(frame: pl.DataFrame, id_col: str, preprocess: Preprocessor) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Preprocess the rows with a review text but no judgments; (frame with judgments, rejects).

    A review the preprocessor cannot turn into judgments keeps null judgments and is rejected."""
    todo = frame.filter(pl.col("review_text").is_not_null() & pl.col("judgments").is_null())
    if todo.is_empty():
        return frame, schema.empty(schema.REJECTS)
    lines, rejects = preprocess(todo.select(pl.col(id_col).alias("review_id"), "paper_id", "review_text"))
    texts = judgments_text(lines) if lines.height else pl.DataFrame(schema={"review_id": pl.String,
                                                                         "judgments": pl.String})
    filled = frame.join(texts.rename({"review_id": id_col, "judgments": "_new"}), on=id_col, how="left")
    filled = filled.with_columns(pl.coalesce("judgments", "_new").alias("judgments")).drop("_new")
    return filled, rejects.with_columns(stage=pl.lit("validate"))


# ---------------------------------------------------------------- the workflow

def paired_scores(scores: pl.DataFrame, perturbations: pl.DataFrame, metrics: Sequence[str],
                  raw_reads_lines: bool = False) -> pl.DataFrame:
    """One row per (metric, perturbation): the candidate's original and perturbed score (NaN when missing).

    `level` is "raw" for a metric that reads the raw review whatever the perturbation acted on, unless
    `raw_reads_lines` (the judgments level alone: such metrics read the judgment lines); the
    raw-level reruns of deterministic strategies (ids ending in RAW_SUFFIX) are left out for those
    metrics, since they repeat the same texts.
    """
    raw_metrics = [] if raw_reads_lines else [m.name for m in get(list(dict.fromkeys(metrics))) if m.reads == "raw"]
    if "level" not in perturbations.columns:
        perturbations = perturbations.with_columns(level=pl.lit("raw"))
    grid = perturbations.select("paper_id", "review_id", "candidate", "strategy", "kind", "level").join(
        pl.DataFrame({"metric": list(metrics)}), how="cross")
    is_raw = pl.col("metric").is_in(raw_metrics)
    grid = grid.filter(~(is_raw & pl.col("candidate").str.ends_with(RAW_SUFFIX))).with_columns(
        level=pl.when(is_raw).then(pl.lit("raw")).otherwise("level"))
    by = scores.select("candidate", "metric", "score")
    out = (grid.join(by.rename({"score": "perturbed"}), on=["candidate", "metric"], how="left")
           .join(by.rename({"candidate": "review_id", "score": "original"}), on=["review_id", "metric"], how="left")
           .with_columns(pl.col("original", "perturbed").fill_null(math.nan),
                         higher_is_better=pl.col("metric").replace_strict(
                             higher_is_better(metrics), return_dtype=pl.Boolean)))
    return out.select("metric", "strategy", "kind", "level", "paper_id", pl.col("review_id").alias("candidate"),
                      "original", "perturbed", "higher_is_better")


def human_correlation(scores: pl.DataFrame, reviews: pl.DataFrame, metrics: Sequence[str]) -> pl.DataFrame:
    """Spearman rho of each metric's original-candidate scores with the human quality score."""
    rated = reviews.filter(pl.col("quality").is_not_null() & pl.col("quality").is_not_nan())
    if rated.is_empty():
        return pl.DataFrame(schema=HUMAN_CORRELATION)
    joined = scores.join(rated.select(pl.col("review_id").alias("candidate"), "quality"), on="candidate")
    rows = []
    for metric in metrics:
        part = joined.filter(pl.col("metric") == metric)
        lm = part["eval_lm"].drop_nulls().first() if part.height else None
        c = spearman(part["score"].to_numpy(), part["quality"].to_numpy())
        rows.append({"metric": metric, "eval_lm": lm, "n": c.n, "n_dropped": c.n_dropped, "rho": c.rho,
                     "p_value": c.p_value, "reason": c.reason})
    return pl.DataFrame(rows, schema=HUMAN_CORRELATION)


@dataclass(frozen=True)
class Perturbed:
    """The perturbation half of the workflow (`perturb_reviews`): the sampled reviews with their judgments,
    every perturbation with its own, the failed ones, whether the deterministic strategies also acted on
    judgment lines, the rejects and how many of them are reviews `prepare` refused. It reads no evaluation
    LM, so one serves every evaluation LM's run: done once, no LLM call is repeated (a rewrite or judgment
    list the cache would not keep, because it failed, is not asked again) and every run tests the same texts.
    `search`: the reviews of the papers the adversary searches on (`[validate] adversary_search_papers`)."""

    frame: pl.DataFrame
    perturbed: pl.DataFrame
    failed: pl.DataFrame
    on_lines: bool
    rejects: pl.DataFrame
    rejected_reviews: int
    search: pl.DataFrame | None = None   # the adversary's search papers, outside the sample (with their judgments)


def perturb_reviews(reviews: pl.DataFrame, v: ValidateConfig, needs_lines: bool, *, backend: Any = None,
                    preprocess: Preprocessor | None = None, backends: Mapping[str, Any] | None = None,
                    beside: Any = None) -> Perturbed:
    """Sample the candidates, fill their judgments, perturb them with every strategy but the adversary and
    fill the perturbed reviews' judgments (`needs_lines`: a metric reads judgment lines); see `run_validation`."""
    strategies, levels, seed = tuple(v.strategies), tuple(v.level), v.seed
    frame, rejects = prepare(reviews)
    if frame.is_empty():
        raise ValueError("no usable reviews (every row was rejected: " +
                         ", ".join(sorted(set(rejects["rule"].to_list()))) + ")")
    everything = frame
    frame = sample(frame, v.max_papers, v.candidates, seed)
    more_rejects = [rejects]
    frame, has_lines = _judged(frame, v, needs_lines, preprocess, more_rejects)
    search = None
    if "adversary" in strategies and v.adversary_search_papers:
        rest = everything.filter(~pl.col("paper_id").is_in(frame["paper_id"].unique().implode()))
        if rest.is_empty():
            raise ValueError(f"adversary_search_papers = {v.adversary_search_papers}, but no paper lies outside the "
                             f"validation sample of {frame['paper_id'].n_unique()}: lower max_papers, or set "
                             "adversary_search_papers = 0 to split the sample")
        search, _ = _judged(sample(rest, v.adversary_search_papers, v.candidates, seed), v, needs_lines, preprocess,
                            more_rejects)
    plain = [s for s in strategies if s != "adversary"]
    on_lines = bool(has_lines and "judgments" in levels)
    perturbed = perturb_candidates(frame, plain, judgment_lines=on_lines, backend=backend, seed=seed,
                                   backends=backends, rewrite_lines=bool(has_lines and needs_lines), beside=beside)
    rerun = [s for s in plain if not strategy(s).needs_llm]
    if on_lines and "raw" in levels and rerun:
        perturbed = pl.concat([perturbed, perturb_candidates(frame, rerun, judgment_lines=False, seed=seed,
                                                             suffix=RAW_SUFFIX)])
    unjudged = perturbed.filter(pl.col("judgments").is_null() & pl.col("review_text").is_not_null())
    if needs_lines and unjudged.height:
        if preprocess is None:
            raise ValueError("judgment metrics need an LLM to preprocess the perturbed reviews (the raw level, and any "
                             "LLM strategy); give one, or validate at the judgments level (level = [\"judgments\"])")
        perturbed, found = fill_judgments(perturbed, "candidate", preprocess)
        more_rejects.append(found)
    failed = perturbed.filter(pl.col("error").is_not_null())
    more_rejects.append(schema.rejects([
        _reject("perturbation_failed", "perturbation", r["candidate"], r["paper_id"], r["error"])
        for r in failed.iter_rows(named=True)]))
    return Perturbed(frame, perturbed, failed, on_lines,
                     pl.concat(more_rejects, how="vertical_relaxed").cast(dict(schema.REJECTS)), rejects.height,
                     search)


def _judged(frame: pl.DataFrame, v: ValidateConfig, needs_lines: bool, preprocess: Preprocessor | None,
            rejects: list[pl.DataFrame]) -> tuple[pl.DataFrame, bool]:
    """Sampled reviews with the judgments the settings ask for, and whether any review has some; the
    preprocessor's rejects are added to `rejects`."""
    if v.judgments == "preprocess":   # one preprocessor on both sides: every review's lines made again
        frame = frame.with_columns(judgments=pl.lit(None, pl.String))
    elif "judgments" not in v.level and preprocess is not None:   # the raw level alone: the original candidate's
        # lines made by the preprocessor that makes the perturbed ones' (the given lines stay the references')
        frame = frame.with_columns(judgments=pl.when("is_candidate").then(None).otherwise("judgments"))
    has_lines = frame["judgments"].is_not_null().any()
    if needs_lines and frame["judgments"].is_null().any():
        # reviews without judgments are preprocessed (a candidate whose judgments the caller cleared so that
        # original and perturbed come from one preprocessor, say); without an LLM, those that carry some
        # judgments are used as they are
        if preprocess is None and not has_lines:
            raise ValueError("judgment metrics need judgments: give reviews with judgments or an LLM to preprocess")
        if preprocess is not None:
            frame, found = fill_judgments(frame, "review_id", preprocess)
            rejects.append(found)
            has_lines = frame["judgments"].is_not_null().any()
    return frame, bool(has_lines)


def _synopses(frame: pl.DataFrame) -> pl.DataFrame:
    """SYNOPSES_WIDE of the reviews' papers (the first value of each paper's rows)."""
    return conform(frame.group_by("paper_id").agg(
        *(pl.col(c).drop_nulls().first() for c in SYNOPSES_WIDE.names() if c != "paper_id" and c in frame.columns)),
        SYNOPSES_WIDE)


def run_validation(
    reviews: pl.DataFrame,
    settings: ValidateConfig,
    resources: Resources,
    *,
    backend: Any = None,
    preprocess: Preprocessor | None = None,
    negatives: int = 4,
    negatives_seed: int = 0,
    backends: Mapping[str, Any] | None = None,
    perturbers: Mapping[str, str] | None = None,
    beside: Any = None,
    made: dict[bool, Perturbed] | None = None,
    adversary_turn: Callable[[], AbstractContextManager[Any]] | None = None,
) -> ValidationResult:
    """The whole workflow on REVIEWS_IN-like rows; see the module docstring.

    `settings` is the `[validate]` table (strategies, metrics, sample, tests, levels);
    `resources` serve the metrics (tasks/metrics/resources.py); `backend` serves the LLM
    strategies; `preprocess` turns reviews without judgments into judgments (needed when a judgment
    metric is asked for and the reviews, or LLM-perturbed ones, carry none). `min_pairs`,
    `correction_scope` ("metric" or the whole "table") and `bootstrap_resamples` shape the tests
    (tasks/stages/validate/stats.py). The "adversary" strategy searches `adversary_steps` steps per
    candidate and metric (tasks/stages/validate/adversary.py) after the other strategies are scored.

    `levels` (GEM section 4 perturbs the raw review, then preprocesses it): "judgments" lets the
    deterministic strategies act on the judgment lines when the reviews carry them (cheap, no LLM);
    "raw" perturbs the raw review and preprocesses the result with `preprocess`. With both, the
    deterministic strategies run at both levels and each validation row says its `level`.

    `beside`: a second backend of `backend`'s local model, for the LLM strategies' rewrites in two lanes
    (`rewrite_in_lanes`). `backends` overrides `backend` per strategy; `perturbers` names what perturbed each strategy
    (an LLM's model, by default "rules" for the deterministic ones and "search" for the adversary; a strategy
    that follows a named procedure, GEM D.2.2 or a proxy of it, has the procedure added: `strategies.perturber`),
    written into the table with the evaluation LM and the seed. `negatives` / `negatives_seed` are
    the score stage's negative references (`[score]`), for the metrics that read them. `made`: the
    perturbations of an earlier call on the same reviews and settings (one per evaluation LM), by whether
    the metrics read judgment lines; what this call perturbs is added to it (`perturb_reviews`).
    `adversary_turn`: a context the adversary's search runs in (runs side by side take turns there).
    """
    v = settings
    strategies, metrics, levels, seed = tuple(v.strategies), tuple(v.metrics), tuple(v.level), v.seed
    check_names(metrics)
    for name in strategies:
        strategy(name)
    needs_lines = any(m.reads == "judgments" for m in get(metrics))
    done = (made or {}).get(needs_lines)
    if done is None:
        done = perturb_reviews(reviews, v, needs_lines, backend=backend, preprocess=preprocess, backends=backends,
                               beside=beside)
        if made is not None:
            made[needs_lines] = done
    frame, perturbed, failed, on_lines = done.frame, done.perturbed, done.failed, done.on_lines
    scored_originals = frame if frame["quality"].is_not_null().any() else frame.filter("is_candidate")
    cands = pl.concat([
        scored_originals.select("paper_id", pl.col("review_id").alias("candidate"), pl.lit("human").alias("source"),
                                "review_id", "review_text", "judgments"),
        perturbed.filter(pl.col("error").is_null()).select(
            "paper_id", "candidate", pl.col("strategy").alias("source"), "review_id", "review_text", "judgments"),
    ]).cast(dict(SCORING_CANDIDATES))
    references = frame.select(REFERENCES.names()).cast(dict(REFERENCES))
    # One level for the whole table unless both were asked for: with "judgments" alone, the metrics
    # that read the raw review read the (perturbed) judgment lines in its place, as GEM's baselines did,
    # so every row of the table comes from the same perturbation of the same text (the adversary edits the
    # raw review: with it, raw-reading metrics keep the raw text and their rows say level "raw").
    one_level = on_lines and "raw" not in levels and "adversary" not in strategies
    if one_level:
        cands = cands.with_columns(review_text=pl.col("judgments"))
        references = references.with_columns(review_text=pl.col("judgments"))
    synopses = _synopses(frame)
    scores = score_candidates(cands, references, synopses, metrics, resources, negatives, negatives_seed)
    pairs = paired_scores(scores, perturbed, metrics, raw_reads_lines=one_level)
    attacks = pl.DataFrame(schema=ADVERSARY)
    if "adversary" in strategies:
        originals = scores.filter(pl.col("source") == "human")
        search = None if done.search is None else (
            done.search.filter("is_candidate"), done.search.select(REFERENCES.names()).cast(dict(REFERENCES)),
            _synopses(done.search))
        with (adversary_turn or contextlib.nullcontext)():
            adv_pairs, adv_perturbed, attacks = run_adversary(
                frame.filter("is_candidate"), originals, references, synopses, metrics, resources,
                steps=v.adversary_steps, patience=v.adversary_patience, seed=seed, negatives=negatives,
                negatives_seed=negatives_seed, search=search)
        pairs = pl.concat([pairs, adv_pairs.select(pairs.columns)])
        perturbed = pl.concat([perturbed, adv_perturbed])
    table = validation_table(pairs, correction=v.correction, alpha=v.alpha, min_pairs=v.min_pairs,
                             family=("metric",) if v.correction_scope == "metric" else (),
                             n_resamples=v.bootstrap_resamples, seed=seed)
    table = with_unusable_perturbations(table, perturbed)
    order = {m: i for i, m in enumerate(metrics)} | {s: i for i, s in enumerate(strategies)}
    table = table.sort(pl.col("metric").replace_strict(order, return_dtype=pl.Int64),
                       pl.col("strategy").replace_strict(order, return_dtype=pl.Int64), "level")
    names = {s: perturber(s, (perturbers or {}).get(s)) for s in strategies}
    table = table.with_columns(perturber=pl.col("strategy").replace_strict(names, default=None,
                                                                             return_dtype=pl.String),
                               eval_lm=pl.lit(resources.eval_lm, pl.String), seed=pl.lit(seed, pl.Int64))
    stats = {"papers": frame["paper_id"].n_unique(), "reviews": frame.height,
             "candidates": int(frame["is_candidate"].sum()), "perturbations": perturbed.height,
             "perturbations_failed": failed.height, "rejected_reviews": done.rejected_reviews,
             "scored_candidates": cands.height}
    if "adversary" in strategies:
        stats["adversary_largest_inflation"] = largest_inflation(attacks)
        stats["adversary_search_papers"] = 0 if done.search is None else done.search["paper_id"].n_unique()
    lengths = pl.DataFrame({"candidate": cands["candidate"],
                            "words": [word_count(t) for t in cands["review_text"].to_list()]},
                           schema={"candidate": pl.String, "words": pl.Float64})
    return ValidationResult(table, human_correlation(scores, frame, metrics), scores, pairs, perturbed,
                            done.rejects, stats,
                            length_confound(scores.filter(pl.col("source") == "human"), lengths), attacks)


__all__ = ["PERTURBATIONS", "REVIEWS_IN", "STRATEGIES", "Perturbed", "ValidationResult", "fill_judgments", "human_correlation",
           "paired_scores", "perturb_candidates", "perturb_reviews", "prepare", "run_validation",
           "sample", "score_candidates"]
