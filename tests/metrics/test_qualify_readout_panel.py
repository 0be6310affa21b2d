"""A panel of logit-readout oracles (`[score] oracle_readouts`, tasks/metrics/readout_panel.py): config,
the average against each member's own readout, the predictor's name, and the qualify stage examining
each member (and a local matcher) by readout and dropping the failed ones. The members are two tiny
random-weight Llama models the test builds (a word-level tokenizer with a chat template), so the test
loads no real LM; it is marked slow all the same since it loads models."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import polars as pl
import pytest

from tasks.core.config import ScoreConfig
from tasks.core.layout import stage_dir, write_parquet
from tasks.metrics.predictors import ask, oracle_key
from tasks.metrics.readout_panel import readout_entries, readout_members, readout_specs
from tasks.metrics.registry import NEEDS, ReadoutMember, Resources, predictor
from tasks.stages.qualify.stage import QualificationFailed, qualified_config, qualify, seats
from tests.tiny_models import tiny_llama

TOPICS = ["graph", "protein", "robot", "speech", "vision", "climate"]
WORDS = ["[UNK]", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>", "Yes", "No", "1", "2", "3", "4", "5", "6",
         "7", "the", "model", "is", "tested", "on", "data", "ablation", "missing", "review", "point", "same",
         "which", "more", "informative", "statement", *TOPICS]


def tiny_lm(folder: Path, seed: int) -> str:
    """A tiny random-weight Llama (tests/tiny_models.py); sharp, so the members' readouts clearly differ."""
    return tiny_llama(folder, WORDS, seed=seed, sharpen=20, max_positions=2048)


@pytest.fixture(scope="module")
def two_lms(tmp_path_factory) -> tuple[str, str]:
    root = tmp_path_factory.mktemp("tiny")
    return tiny_lm(root / "a", 0), tiny_lm(root / "b", 1)


def test_readout_panel_config() -> None:
    assert readout_specs(ScoreConfig()) == []                             # no panel: the evaluation LM alone
    two = ScoreConfig(oracle_readouts=["smollm2", {"eval_lm": "smollm2", "dtype": "bfloat16"}])
    assert [s.resolved().key for s in readout_specs(two)] == ["smollm2|float32|none", "smollm2|bfloat16|none"]
    lms = ScoreConfig(eval_lms=["smollm2", {"eval_lm": "smollm2", "dtype": "bfloat16"}], oracle_readouts="eval_lms")
    assert readout_entries(lms) == lms.eval_lms and len(readout_specs(lms)) == 2
    assert [e.eval_lm for e in readout_entries(ScoreConfig(oracle_readouts="eval_lms"))] == ["smollm2"]
    with pytest.raises(ValueError, match="twice"):
        readout_specs(ScoreConfig(oracle_readouts=["smollm2", "smollm2"]))
    member = ReadoutMember("m", lambda frame: frame, lambda prompts, answers: None)   # type: ignore[arg-type,return-value]
    assert Resources(oracle="readout", readouts=(member,)).provides(NEEDS["llm_oracle"])
    assert not Resources(oracle="readout").provides(NEEDS["llm_oracle"])


@pytest.mark.slow
def test_the_panel_averages_its_members_own_readouts(two_lms) -> None:
    a, b = two_lms
    cfg = ScoreConfig(oracle_readouts=[a, b], token_budget=512)
    panel = readout_members(cfg)
    questions = {f"q{i}": ("the review is tested", f"the {t} model is tested on {t} data . same point ?")
                 for i, t in enumerate(TOPICS)}
    alone = {m.key: Resources(eval_lm=m.key, readout=m.readout, read_answers=m.read_answers) for m in panel}
    both = Resources(eval_lm=panel[0].key, readout=panel[0].readout, read_answers=panel[0].read_answers,
                     readouts=panel)
    assert oracle_key(both) == f"readout:{a}|float32|none+{b}|float32|none"
    assert oracle_key(alone[panel[0].key]) == f"readout:{a}|float32|none"
    for kind in ("critic", "bins"):
        own = [ask(r, kind, questions, "test") for r in alone.values()]
        mean = ask(both, kind, questions, "test")
        assert set(mean) == set(questions)
        for k in questions:
            assert not math.isnan(own[0][k]) and not math.isnan(own[1][k])
            assert mean[k] == pytest.approx((own[0][k] + own[1][k]) / 2, abs=1e-9)
        assert any(abs(own[0][k] - own[1][k]) > 1e-3 for k in questions)   # the members differ: the mean is a mean


def _review(topic: str, r: int) -> str:
    return f"the {topic} model is tested on {topic} data . " + "the ablation is missing . " * (r + 1)


@pytest.mark.slow
def test_each_member_and_a_local_matcher_sit_the_exam_by_readout(two_lms, exam_pipeline) -> None:
    a, b = two_lms
    matcher = f'[[pipelines.exam.score.review_quality.matchers]]\nbackend = "local"\nmodel = "{a}"\n'
    cfg = exam_pipeline(["tvd_mi", "points_f1_strengths"], 2,
                        score=f'token_budget = 512\noracle_readouts = ["{a}", "{b}"]\n', tables=matcher)
    curated = stage_dir(cfg, "exam", "curate", "GREBench.cc/2025/Demo")
    write_parquet(pl.DataFrame([{"paper_id": f"p{p}", "review_id": f"p{p}-r{r}", "review_text": _review(t, r)}
                                for p, t in enumerate(TOPICS) for r in range(3)]), curated / "reviews.parquet")
    write_parquet(pl.DataFrame({"paper_id": [f"p{p}" for p in range(6)], "in_benchmark": [True] * 6,
                                "abstract": [f"the {t} model" for t in TOPICS]}), curated / "papers.parquet")
    names = [(s.role, s.name) for s in seats(cfg)]
    assert names == [("matcher", f"local/{a}"), ("oracle", f"readout:{a}|float32|none"),
                     ("oracle", f"readout:{b}|float32|none")]
    with contextlib.suppress(QualificationFailed):   # random weights: a role may be left without a qualified model
        qualify(cfg, "exam")
    table = pl.read_parquet(stage_dir(cfg, "exam", "qualify") / "qualification.parquet")
    assert table.height == 9 and (table["confidence"] == "readout").all()
    assert sorted(set(zip(table["role"], table["model"], strict=True))) == sorted(names)
    n = {(m, t): k for m, t, k in table.select("model", "test", "n").iter_rows()}
    assert n[(f"readout:{a}|float32|none", "pertinence")] == 4 and n[(f"local/{a}", "pertinence")] == 8
    # the second member failed, the first passed (the table as the stage would leave it): the panel loses the second
    rigged = table.with_columns(passed=pl.col("model") != f"readout:{b}|float32|none")
    write_parquet(rigged, stage_dir(cfg, "exam", "qualify") / "qualification.parquet")
    kept = qualified_config(cfg, "exam").score
    assert [e.eval_lm for e in kept.oracle_readouts] == [a] and [m.model for m in kept.review_quality.matchers] == [a]
    write_parquet(rigged.with_columns(passed=pl.col("role") == "matcher"),
                  stage_dir(cfg, "exam", "qualify") / "qualification.parquet")
    with pytest.raises(QualificationFailed, match="oracle: .* all failed"):
        qualified_config(cfg, "exam")


def test_the_oracle_cells_with_a_panel_average_and_name_it() -> None:
    """Two members with rule-based readouts through the registry: tvd_mi (linear in the critic) is the
    members' mean, a member with no mass on Yes / No leaves the question to the other, and the score rows
    name the panel."""
    from tasks.core.frames import human_candidates
    from tasks.core.schema import REFERENCES, SYNOPSES_WIDE
    from tasks.metrics import score_metrics
    from tasks.metrics.negatives import draw_negatives

    refs = pl.DataFrame([{"paper_id": f"p{p}", "review_id": f"p{p}-r{r}", "review_text": f"Review {r} of {p}.",
                          "judgments": f"The reviewer questions the {TOPICS[p]} claim {r}."}
                         for p in range(3) for r in range(2)], schema=REFERENCES)
    syn = pl.DataFrame([{"paper_id": f"p{p}", "abstract": "a", "assw": None} for p in range(3)], schema=SYNOPSES_WIDE)
    cands = human_candidates(refs)
    negatives = draw_negatives(cands, refs, 2, seed=0)

    def member(key: str, yes_same: float, silent: str | None = None) -> ReadoutMember:
        def readout(requests: pl.DataFrame) -> pl.DataFrame:
            rows = []
            for key_, user in requests.select("key", "user").iter_rows():
                a, b = (next(t for t in TOPICS if t in part) for part in user.split("### Statement"))
                p_yes, p_no = (yes_same, 1 - yes_same) if a == b else (0.2, 0.8)
                rows.append((key_, *((0.0, 0.0) if silent and silent in user else (p_yes, p_no))))
            return pl.DataFrame(rows, schema={"key": pl.String, "p_yes": pl.Float64, "p_no": pl.Float64}, orient="row")
        return ReadoutMember(key, readout, lambda prompts, answers: None)   # type: ignore[arg-type,return-value]

    def tvd(*members: ReadoutMember) -> pl.DataFrame:
        resources = Resources("lm", readout=members[0].readout, readouts=members if len(members) > 1 else ())
        return score_metrics(["tv_fvar_statement"], cands, refs, syn, resources, negatives=negatives)

    a, b = member("a", 0.9), member("b", 0.5)
    one, two, both = tvd(a), tvd(b), tvd(a, b)
    assert (both["eval_lm"] == "readout:a+b").all() and (one["eval_lm"] == "readout:lm").all()
    assert predictor("tv_fvar_statement", "readout:a+b") == "readout:a+b"   # the leaderboard's predictor column
    assert both["score"].to_list() == pytest.approx(((one["score"] + two["score"]) / 2).to_list())
    assert one["score"].to_list() != pytest.approx(two["score"].to_list())
    # b puts no mass on Yes / No for the graph paper's questions: a answers them alone
    partial = tvd(a, member("b", 0.5, silent="graph"))
    graph = partial["paper_id"] == "p0"
    assert partial.filter(graph)["score"].to_list() == pytest.approx(one.filter(graph)["score"].to_list())
