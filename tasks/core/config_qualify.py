"""`[qualify]`: the qualification exam of the LLMs in a judging role."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tasks.core.config_base import Frozen, Seed
from tasks.core.config_llm import LLMConfig


class QualifyConfig(Frozen):
    """The qualification exam of the LLMs in a judging role (tasks/stages/qualify, Auto-PRE)."""

    items: int = Field(20, ge=1, le=100_000)             # exam items per test (papers / review pairs), drawn with `seed`
    seed: Seed = 0
    # pass lines; "mean": the mean score of the models examined in the role (as Auto-PRE does)
    consistency_threshold: float | Literal["mean"] = "mean"
    pertinence_threshold: float | Literal["mean"] = "mean"
    # self-confidence passes when mean confidence on the easy set minus the hard set exceeds this
    self_confidence_margin: float = 0.0
    # a failing model: "drop" it from its role (the run stops if a role is left empty), "stop" the run,
    # "report": keep it, its `qualification` rows say it failed and the leaderboard marks its columns, or
    # "weigh": keep it as "report" does, and fuse the judging panel with every member's exam weight (a
    # failed member weighs what it scored; Auto-PRE's weighting without its selection)
    on_fail: Literal["drop", "stop", "report", "weigh"] = "drop"
    # the LLM that polishes the irrelevant reviews and rephrases the hard set (same keys as any
    # backend); None: deterministic edits (markdown formatting; another review of the same paper)
    rewriter: LLMConfig | None = None
