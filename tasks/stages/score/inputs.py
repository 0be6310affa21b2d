"""What the score stage reads: curated human reviews, their judgments and the paper synopses.

Human reviews are the references; as candidates they are scored leave-one-out. Generated
candidates (the generate stage) and submitted ones (`grebench submit`, tasks/core/submitted.py) are
concatenated to `human_candidates(...)` in the SCORING_CANDIDATES schema. Frames: tasks/core/schema.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from tasks.core.config import Config
from tasks.core.frames import (
    curated_reviews,
    human_candidates,
    paper_groups,
    read_judgments,
    read_synopses,
    scoring_candidates,
)
from tasks.core.schema import REFERENCES, SCORING_CANDIDATES, SYNOPSES_WIDE, conform
from tasks.core.submitted import submitted_candidates
from tasks.metrics import Metric


@dataclass(frozen=True)
class ScoringInputs:
    references: pl.DataFrame   # REFERENCES
    candidates: pl.DataFrame   # SCORING_CANDIDATES
    synopses: pl.DataFrame     # SYNOPSES_WIDE
    negatives: pl.DataFrame | None = None   # NEGATIVES when a metric reads negative references


def load_inputs(cfg: Config, pipeline: str, metrics: Sequence[Metric]) -> ScoringInputs:
    """References, human, generated and submitted candidates and synopses for the metrics given."""
    reviews = curated_reviews(cfg, pipeline)
    judgments = read_judgments(cfg, pipeline, metrics)
    if judgments is None:
        judgments = pl.DataFrame(schema={"review_id": pl.String, "judgments": pl.String})
    synopses = read_synopses(cfg, pipeline, metrics)
    if synopses is None:
        synopses = pl.DataFrame(schema=SYNOPSES_WIDE)
    references = reviews.join(judgments, on="review_id", how="left").select(REFERENCES.names()).cast(dict(REFERENCES))
    generated = pl.concat([scoring_candidates(cfg, pipeline), submitted_candidates(cfg, pipeline)]).join(
        references.select("paper_id").unique(), on="paper_id", how="semi")
    candidates = pl.concat([human_candidates(references).cast(dict(SCORING_CANDIDATES)),
                            generated.cast(dict(SCORING_CANDIDATES))])
    negatives = None
    if any(m.negatives for m in metrics):
        from tasks.metrics.negatives import draw_negatives

        negatives = draw_negatives(candidates, references, cfg.score.negatives, cfg.score.negatives_seed,
                                   paper_groups(cfg, pipeline))
    return ScoringInputs(references, candidates, conform(synopses, SYNOPSES_WIDE), negatives)
