"""`[curate]`: which papers and human reviews make the benchmark."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from tasks.core.config_base import Frozen, Seed


class CurateConfig(Frozen):
    min_confidence: float = 4
    min_reviews: int = Field(3, ge=1, le=1000)
    max_reviews: int = Field(5, ge=1, le=1000)
    max_rating_variance: float = Field(1.5, ge=0)
    variance_ddof: Literal[0, 1] = 0
    common_scale: tuple[float, ...] = (1, 3, 5, 6, 8, 10)
    sample_size: int = Field(100, ge=1, le=1_000_000)
    seed: Seed = 2025
    # The confidence forms' scale (curate): a confidence outside it is rejected as out of range.
    confidence_range: tuple[float, float] = (1, 5)
    # which version of an edited review curation and scoring use: "first" (before the rebuttal) or "final"
    review_version: Literal["first", "final"] = "first"

    @model_validator(mode="after")
    def _review_bounds(self) -> CurateConfig:
        if self.min_reviews > self.max_reviews:
            raise ValueError("min_reviews must not exceed max_reviews")
        if self.confidence_range[0] > self.confidence_range[1]:
            raise ValueError("confidence_range must be [low, high] with low <= high")
        if self.min_confidence > self.confidence_range[1]:
            raise ValueError(f"min_confidence {self.min_confidence:g} is above the confidence scale's top "
                             f"{self.confidence_range[1]:g}: no review could be kept")
        return self

    @field_validator("common_scale")
    @classmethod
    def _a_scale(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if len(value) < 2:
            raise ValueError("must list at least two ratings")
        if any(b <= a for a, b in zip(value, value[1:], strict=False)):
            raise ValueError("must be strictly increasing")
        return value
