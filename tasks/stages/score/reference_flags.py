"""Human references that may not be human: a Binoculars score per reference, flagged below a threshold.

A candidate that writes like the LLM behind an AI-written "human" review is rewarded for it, so the
score stage scores every reference with Binoculars (Beyond Rating, paper 003, section 4.6; the one
implementation is tasks/metrics/review_quality/binoculars.py) on the observer / performer pair of
`[score.reference_flags]` (by default the evaluation LM), and writes

    data/<pipeline>/score/reference_flags.parquet   REFERENCE_FLAGS (tasks/core/schema.py)

The leaderboard mart reads it beside the per-pair scores to give each row's mean without the flagged
references (sql/marts/leaderboard.sql). A low Binoculars score means text an LM finds unsurprising
for its own expectations: likely machine-written.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import polars as pl

from tasks.core.config import Config
from tasks.core.layout import stage_dir, write_parquet
from tasks.core.schema import REFERENCE_FLAGS, conform
from tasks.lm import ModelSpec, eval_spec


def flag_specs(cfg: Config) -> tuple[ModelSpec, ModelSpec] | None:
    """The observer and performer the config names (unset: the evaluation LM; one LM for both when
    only the observer is given); None when the evaluation LM sits behind a server (no logits here)."""
    flags = cfg.score.reference_flags
    observer = ModelSpec(flags.observer) if flags.observer else eval_spec(cfg.score)
    if observer.server is not None:
        return None
    performer = ModelSpec(flags.performer) if flags.performer else observer
    return observer, performer


def single_form(specs: tuple[ModelSpec, ModelSpec] | None) -> bool:
    """Whether the pair is one LM twice (the single-model form of Binoculars)."""
    return specs is not None and specs[0].resolved().key == specs[1].resolved().key


def reference_flags(references: pl.DataFrame, specs: tuple[ModelSpec, ModelSpec] | None, threshold: float | None,
                    earlier: pl.DataFrame | None = None, source: str | None = None) -> pl.DataFrame:
    """REFERENCE_FLAGS rows, one per reference (paper_id, review_id, review_text). A score in `earlier`
    (REFERENCE_FLAGS of a previous run) for the same review text on the same observer and performer
    is reused, not computed again; the threshold is applied anew. `threshold` None (a form with no
    calibrated threshold): the scores are kept and no reference is flagged (`binoculars_uncalibrated`)."""
    from tasks.metrics import binoculars_scores as reviews_scores

    refs = references.select("paper_id", "review_id", "review_text").unique("review_id", maintain_order=True)
    shas = [hashlib.sha256((t or "").encode()).hexdigest() for t in refs["review_text"].to_list()]
    if specs is None:
        scored: list[tuple[float, str | None]] = [(math.nan, "binoculars_needs_local_lm")] * refs.height
        names: tuple[str | None, str | None] = (None, None)
    else:
        names = (specs[0].resolved().key, specs[1].resolved().key)
        known = {} if earlier is None else {
            sha: (value, why) for sha, value, why, o, p in earlier.select(
                "text_sha256", "binoculars", "reason", "observer", "performer").iter_rows() if (o, p) == names}
        todo = [i for i, sha in enumerate(shas) if sha not in known]
        fresh = dict(zip(todo, reviews_scores(specs, [refs["review_text"][i] for i in todo]), strict=True)) if todo else {}
        scored = [fresh[i] if i in fresh else known[sha] for i, sha in enumerate(shas)]
    values = [v for v, _ in scored]
    flags = [None if math.isnan(v) or threshold is None else v < threshold for v in values]
    reasons = [why or (None if threshold is not None else "binoculars_uncalibrated") for _, why in scored]
    return conform(refs.drop("review_text").with_columns(
        pl.Series("binoculars", values, pl.Float64),
        pl.lit(threshold, pl.Float64).alias("threshold"),
        pl.lit(source, pl.String).alias("threshold_source"),
        pl.Series("flagged", flags, pl.Boolean),
        pl.Series("reason", reasons, pl.String),
        pl.lit(names[0], pl.String).alias("observer"),
        pl.lit(names[1], pl.String).alias("performer"),
        pl.Series("text_sha256", shas, pl.String),
    ), REFERENCE_FLAGS)


def write_reference_flags(cfg: Config, pipeline: str, references: pl.DataFrame) -> dict[str, Any]:
    """Score and write the reference flags (nothing when `[score.reference_flags] enabled = false`);
    figures for the stage summary."""
    flags = cfg.score.reference_flags
    if not flags.enabled:
        return {}
    path = stage_dir(cfg, pipeline, "score") / "reference_flags.parquet"
    earlier = pl.read_parquet(path) if path.is_file() else None
    if earlier is not None and "text_sha256" not in earlier.columns:
        earlier = None
    specs = flag_specs(cfg)
    threshold, source = flags.for_form(single_form(specs))
    frame = reference_flags(references, specs, threshold, earlier, source)
    write_parquet(frame, path)
    return {"reference_flags": {"references": frame.height, "flagged": int(frame["flagged"].sum() or 0),
                                "unscored": int(frame["binoculars"].is_nan().sum()), "threshold_source": source}}
