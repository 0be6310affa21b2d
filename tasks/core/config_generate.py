"""`[generate]`: the candidate LLMs that write reviews, and the injection track."""

from __future__ import annotations

from datetime import date
from typing import Literal

from pydantic import Field, field_validator, model_validator

from tasks.core.config_base import Frozen, Seed
from tasks.core.config_llm import LLMConfig


class CandidateConfig(LLMConfig):
    """One candidate LLM that writes reviews (generate stage); the LLM settings plus these."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # the model's name on the leaderboard
    knowledge_cutoff: date            # papers first public on or before this date are left out
    max_tokens: int = Field(2048, ge=1, le=1_000_000)
    max_context_tokens: int = Field(8192, ge=256, le=10_000_000)  # prompt + answer; a longer paper is cut at a section
    prompt_version: str = "review-v1"  # tasks/prompts/<version>.md; part of every cache key

    @model_validator(mode="after")
    def _room_for_paper(self) -> CandidateConfig:
        if self.max_tokens >= self.max_context_tokens:
            raise ValueError("max_tokens must be smaller than max_context_tokens")
        return self


class InjectionConfig(Frozen):
    """`[generate.injection]`: the injection track (tasks/stages/generate/injection.py). Each candidate
    also reviews copies of a few benchmark papers carrying a planted instruction to an AI reviewer;
    the score stage measures how far its rating and first metric move (`injection_shifts`)."""

    papers: int = Field(0, ge=0, le=100_000)        # benchmark papers drawn for the track; 0: no track
    seed: Seed = 0                       # the draw
    variants: tuple[Literal["visible", "hidden"], ...] = ("visible", "hidden")
    confidence: float = Field(0.90, gt=0, lt=1)   # the level of the shifts' t intervals


class GenerateConfig(Frozen):
    """Candidate review generation (tasks/stages/generate/reviews.py) and its contamination guard."""

    chars_per_token: float = Field(3.5, gt=0)  # anthropic: context estimate (no local tokenizer)
    candidates: tuple[CandidateConfig, ...] = ()
    # candidates reviewing at once (local ones split the cores between them: tasks/lm/local.py `sharing_cores`)
    candidates_at_once: int = Field(2, ge=1, le=1024)
    # `grebench submit` (tasks/stages/generate/submit.py): a submitted review longer than this is rejected (review_too_long)
    max_review_chars: int = Field(60000, ge=100, le=10_000_000)
    # The injection track: papers with a planted instruction to AI reviewers
    injection: InjectionConfig = InjectionConfig()

    @field_validator("candidates")
    @classmethod
    def _unique_names(cls, value: tuple[CandidateConfig, ...]) -> tuple[CandidateConfig, ...]:
        names = [c.name for c in value]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"candidate names must be unique; repeated: {repeated}")
        return value
