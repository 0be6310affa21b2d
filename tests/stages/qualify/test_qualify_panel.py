"""Auto-PRE's weighted panel from the exam to the board: two judges sit the exam, each gets the mean of
its scores as its fusion weight, and the judge's board has each member's column beside the panel's
weighted one. With on_fail = "weigh" judges that fail stay in the panel, weighed by what they scored."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl
import pytest

from tasks.core.layout import stage_dir, write_parquet
from tasks.metrics import candidate_scores, score_metrics
from tasks.metrics.panel import MEMBER_NOTE
from tasks.metrics.registry import Resources
from tasks.stages.qualify.exam import Question
from tasks.stages.qualify.examinee import Verdict
from tasks.stages.qualify.stage import qualified_config, qualify
from tasks.stages.validate.leaderboard import leaderboard
from tasks.stages.validate.rescore import score_candidates
from tasks.testing.openai_server import OpenAIServer
from tests.stages.qualify.test_qualify import TOPICS, _reviews


@dataclass
class Scripted:
    """An examinee of known behaviour: the right review, except on the pertinence items in `misses` (both
    orders), and surer on the easy set than on the hard one when `calibrated`."""

    name: str
    misses: frozenset[int] = frozenset()
    calibrated: bool = True
    confidence: str = "readout"

    def answer(self, questions: Sequence[Question]) -> list[Verdict]:
        out = []
        for q in questions:
            if q.target is None:                       # consistency: the same review in both orders
                choice = 1 if q.order == 0 else 2
            elif q.set == "pertinence" and q.item in self.misses:
                choice = 3 - q.target
            else:
                choice = q.target
            sure = 0.9 if q.set == "easy" or not self.calibrated else 0.6
            out.append(Verdict(choice, sure))
        return out


def _exam_data(cfg) -> None:
    curated = stage_dir(cfg, "exam", "curate", "GREBench.cc/2025/Demo")
    write_parquet(_reviews(judged=False), curated / "reviews.parquet")
    write_parquet(pl.DataFrame({"paper_id": [f"p{p}" for p in range(6)], "in_benchmark": [True] * 6,
                                "abstract": [f"We study {t} learning." for t in TOPICS]}), curated / "papers.parquet")


def _judges(sharp: OpenAIServer, fair: OpenAIServer) -> str:
    return "".join(f'[[pipelines.exam.score.judges]]\nbackend = "openai"\nmodel = "{m}"\nbase_url = "{s.base_url}"\n'
                   f'api_key_env = ""\nuse_batches = false\nmax_retries = 0\n' for m, s in (("sharp", sharp), ("fair", fair)))


def _candidates() -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    from tasks.core.frames import human_candidates
    from tasks.core.schema import SYNOPSES_WIDE

    refs = pl.DataFrame([{"paper_id": "p0", "review_id": f"r{i}", "review_text": f"Review {i}: the proof is wrong.",
                          "judgments": None} for i in range(3)],
                        schema={"paper_id": pl.String, "review_id": pl.String, "review_text": pl.String,
                                "judgments": pl.String})
    syn = pl.DataFrame([{"paper_id": "p0", "abstract": "A proof.", "assw": None}], schema=SYNOPSES_WIDE)
    return human_candidates(refs), refs, syn


def test_two_qualified_judges_make_a_weighted_panel_on_the_board(tmp_path, exam_pipeline) -> None:
    """Both judges pass (fixed pass lines); "fair" misses one pertinence item of four, so it weighs
    (1 + 3/4 + 1) / 3 against "sharp"'s 1. `panel_weights` says so with applied true, the score stage's
    config carries the weights, and the judge's board has three columns: each member's rating (8 and 2)
    and the panel's weighted mean of them; validation rescores the panel's rating alone."""
    from tasks.lm import make_lm

    with OpenAIServer(lambda body: "Score: 8") as sharp, OpenAIServer(lambda body: "Score: 2") as fair:
        cfg = exam_pipeline(["llm_judge_noref"], 4, tables=_judges(sharp, fair),
                            qualify="consistency_threshold = 0.7\npertinence_threshold = 0.7\n")
        _exam_data(cfg)
        examinees = {"openai/sharp": Scripted("openai/sharp"), "openai/fair": Scripted("openai/fair", frozenset({0}))}
        summary = qualify(cfg, "exam", make=lambda seat: examinees[seat.name])
        assert summary.details["qualified"] == {"judge:openai/fair": True, "judge:openai/sharp": True}
        weights = pl.read_parquet(stage_dir(cfg, "exam", "qualify") / "panel_weights.parquet")
        fair_weight = (1 + 3 / 4 + 1) / 3
        assert weights.rows() == [("openai/sharp", 1.0, "exam", True),
                                  ("openai/fair", pytest.approx(fair_weight), "exam", True)]
        qualified = qualified_config(cfg, "exam")
        assert [j.model for j in qualified.score.judges] == ["sharp", "fair"]
        assert qualified.score.judge_weights == {"openai/sharp": 1.0, "openai/fair": pytest.approx(fair_weight)}
        judges = tuple(make_lm(j, tmp_path) for j in qualified.score.judges)
        resources = Resources(judges=judges, panel_weights=qualified.score.judge_weights)
        scores = score_metrics(["llm_judge_noref"], *_candidates(), resources)
        rescored = score_candidates(*_candidates(), ["llm_judge_noref"], resources)   # validation's rescoring
    board = leaderboard(candidate_scores(scores))
    means = dict(board.select("eval_lm", "mean").iter_rows())
    panel = "generate:openai/sharp+generate:openai/fair"
    assert means == {"generate:openai/sharp": 8.0, "generate:openai/fair": 2.0,
                     panel: pytest.approx((8 * 1.0 + 2 * fair_weight) / (1.0 + fair_weight))}
    assert means[panel] != pytest.approx(5.0)                    # not the plain mean
    assert (scores.filter(pl.col("eval_lm") != panel)["note"] == MEMBER_NOTE).all()
    assert scores.filter(pl.col("eval_lm") == panel)["note"].is_null().all()
    assert set(rescored["eval_lm"]) == {panel}                    # validation tests the panel's rating alone


def test_weigh_keeps_failed_judges_and_weighs_them_by_their_exam(tmp_path, exam_pipeline) -> None:
    """With the default pass lines (the role's mean) "fair" fails pertinence, and the uncalibrated
    "flat" fails self-confidence. "drop" leaves "sharp" alone; "weigh" keeps all three, each at the mean of
    its scores (a test it could not be scored on counts 0), and says so with applied true; "report"
    keeps them unweighted, applied false."""
    with OpenAIServer(lambda body: "Score: 8") as server:
        tables = "".join(f'[[pipelines.exam.score.judges]]\nbackend = "openai"\nmodel = "{m}"\n'
                         f'base_url = "{server.base_url}"\napi_key_env = ""\n' for m in ("sharp", "fair", "flat", "mute"))
        cfg = exam_pipeline(["llm_judge_noref"], 4, tables=tables, qualify='on_fail = "weigh"\n')
        _exam_data(cfg)
        examinees = {"openai/sharp": Scripted("openai/sharp"), "openai/fair": Scripted("openai/fair", frozenset({0})),
                     "openai/flat": Scripted("openai/flat", calibrated=False)}

        @dataclass
        class Mute:
            name: str
            confidence: str = "stated"

            def answer(self, questions):
                return [Verdict(None, math.nan)] * len(questions)

        make = lambda seat: examinees.get(seat.name) or Mute(seat.name)   # noqa: E731
        summary = qualify(cfg, "exam", make=make)
        assert summary.details["qualified"] == {"judge:openai/fair": False, "judge:openai/flat": False,
                                                "judge:openai/mute": False, "judge:openai/sharp": True}
        weights = {m: (w, a) for m, w, _, a in
                   pl.read_parquet(stage_dir(cfg, "exam", "qualify") / "panel_weights.parquet").iter_rows()}
        expected = {"openai/sharp": 1.0, "openai/fair": (1 + 3 / 4 + 1) / 3, "openai/flat": 2 / 3, "openai/mute": 0.0}
        assert {m: w for m, (w, _) in weights.items()} == pytest.approx(expected)
        assert all(a for _, a in weights.values())
        kept = qualified_config(cfg, "exam")
        assert [j.model for j in kept.score.judges] == ["sharp", "fair", "flat", "mute"]
        assert kept.score.judge_weights == pytest.approx(expected)
        dropped = cfg.model_copy(update={"qualify": cfg.qualify.model_copy(update={"on_fail": "drop"})})
        assert [j.model for j in qualified_config(dropped, "exam").score.judges] == ["sharp"]
        report = cfg.model_copy(update={"qualify": cfg.qualify.model_copy(update={"on_fail": "report"})})
        qualify(report, "exam", make=make)
        assert not pl.read_parquet(stage_dir(cfg, "exam", "qualify") / "panel_weights.parquet")["applied"].any()
        assert qualified_config(report, "exam").score.judge_weights == {}


@pytest.mark.slow
def test_the_judges_of_full_rate_on_the_embedded_model(tmp_path) -> None:
    """`full`'s panel offline: SmolLM2 on its weights (read by its probabilities over the scale) and behind
    the in-process OpenAI-compatible server (read from the chat API's top-20 logprobs); each rates every
    candidate, and the panel's rating is their weighted mean."""
    from pathlib import Path

    import flows  # noqa: F401  (registers the "served:" base URLs, as every flow does)
    from tasks.core.config import load_config
    from tasks.lm.lazy import LazyLM

    cfg = load_config(Path(__file__).resolve().parents[3] / "pipelines.toml").for_pipeline("full")
    weights = {"local/smollm2": 0.5, "openai/smollm2": 0.25}
    resources = Resources(judges=tuple(LazyLM(j, tmp_path) for j in cfg.score.judges), panel_weights=weights)
    scores = score_metrics(["llm_judge_noref"], *_candidates(), resources)
    by = {(c, lm): s for c, lm, s in scores.select("candidate", "eval_lm", "score").iter_rows()}
    local, served = "readout:local/smollm2", "toplogprobs:openai/smollm2"
    assert {lm for _, lm in by} == {local, served, f"{local}+{served}"}
    for c in ("r0", "r1", "r2"):
        assert 0 <= by[(c, local)] <= 10 and 0 <= by[(c, served)] <= 10
        assert by[(c, f"{local}+{served}")] == pytest.approx((0.5 * by[(c, local)] + 0.25 * by[(c, served)]) / 0.75)
