"""Auto-PRE's weighted panels: a panel's value weighs each member by its fusion weight,
the mean of its qualification-exam scores (paper 001: consistency, pertinence, self-confidence)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import polars as pl
import pytest

from tasks.core.config import Config, LLMConfig, QualifyConfig, ScoreConfig
from tasks.lm.types import ChatResult
from tasks.metrics.panel import ask_panel, mean_of_members
from tasks.metrics.registry import Resources
from tasks.stages.qualify.stage import fusion_weights, panel_weights, with_fusion_weights


@dataclass
class Member:
    """A judge that answers every question with one fixed number (a real ChatLM's interface)."""

    model: str
    answer: str
    name: str = "openai"
    cfg: LLMConfig = field(init=False)

    def __post_init__(self) -> None:
        self.cfg = LLMConfig(backend="openai", model=self.model)

    def generate(self, requests, accept=None):
        return [ChatResult(text=self.answer, model=self.model) for _ in requests]


def test_the_weighted_mean_leaves_out_members_without_a_value():
    assert mean_of_members([2.0, 8.0]) == 5.0
    assert mean_of_members([2.0, 8.0], [3.0, 1.0]) == 3.5
    assert mean_of_members([math.nan, 8.0], [3.0, 1.0]) == 8.0
    assert math.isnan(mean_of_members([math.nan, math.nan], [1.0, 1.0]))


def test_a_panel_weighs_its_members_by_their_fusion_weights():
    judges = (Member("strong", "Score: 8"), Member("weak", "Score: 2"))
    questions = {"q1": ("system", "user")}
    parse = lambda text: float(text.split(":")[1])   # noqa: E731
    plain = ask_panel(Resources(judges=judges), questions, parse, "judge", 8)
    weighted = ask_panel(Resources(judges=judges, panel_weights={"openai/strong": 0.9, "openai/weak": 0.3}),
                         questions, parse, "judge", 8)
    assert plain == {"q1": 5.0} and math.isclose(weighted["q1"], (8 * 0.9 + 2 * 0.3) / 1.2)


def test_the_exam_sets_each_members_weight_and_a_weight_set_by_hand_wins():
    table = pl.DataFrame({"model": ["openai/a"] * 3 + ["openai/b"] * 3 + ["readout:x"],
                          "role": ["judge"] * 6 + ["oracle"],
                          "test": ["consistency", "pertinence", "self_confidence"] * 2 + ["pertinence"],
                          "score": [0.9, 0.6, 0.9, 0.5, 0.4, 0.6, 0.7]})
    weights = fusion_weights(table, ["openai/a", "openai/b"])
    assert weights.keys() == {"openai/a", "openai/b"}
    assert math.isclose(weights["openai/a"], 0.8) and math.isclose(weights["openai/b"], 0.5)
    judges = (LLMConfig(backend="openai", model="a"), LLMConfig(backend="openai", model="b"))
    cfg = Config(score=ScoreConfig(judges=judges))
    weighted = with_fusion_weights(cfg, table)
    assert weighted.score.judge_weights == weights
    by_hand = Config(score=ScoreConfig(judges=judges, judge_weights={"openai/b": 2.0}))
    assert with_fusion_weights(by_hand, table).score.judge_weights == {**weights, "openai/b": 2.0}
    # the table the qualify stage writes: each member's weight, where it comes from, and whether it is used
    rows = panel_weights(by_hand, table).rows()
    assert rows == [("openai/a", pytest.approx(0.8), "exam", True), ("openai/b", 2.0, "config", True)]
    lone = Config(score=ScoreConfig(judges=(*judges, LLMConfig(backend="openai", model="c"))),
                  qualify=QualifyConfig(on_fail="report"))
    assert [(m, w, s, a) for m, w, s, a in panel_weights(lone, table).rows()][2] == ("openai/c", 1.0, "none", False)
