"""The point matcher's exam (Beyond Rating's M(a, h) in the qualify stage): the pairs drawn from curated
reviews (their sentences, or the points of a score run), the statistics on hand-worked verdicts, and
matchers of known behaviour through the local Anthropic-compatible server with the real client: a
careful one passes, an always-"Yes" one fails pertinence and is dropped, or stops the run."""

from __future__ import annotations

import math
import re

import polars as pl
import pytest

from tasks.core.layout import stage_dir, write_parquet
from tasks.stages.qualify.examinee import Verdict
from tasks.stages.qualify.grade import self_confidence
from tasks.stages.qualify.matcher import (
    PointQuestion,
    draw_match_exam,
    exam_units,
    match_consistency,
    match_pertinence,
    parse_stated_match,
    polish_point,
    sentences,
)
from tasks.stages.qualify.stage import QualificationFailed, qualified_config, qualify, seats
from tasks.testing.anthropic_server import AnthropicServer, user_text

TOPICS = ["graph", "protein", "robot", "speech", "vision", "climate"]
VERBS = ["is evaluated", "gets tested", "is benchmarked"]
CONCERNS = ["An ablation study is missing", "Stronger baselines are needed", "Error bars are absent"]


def _review(topic: str, r: int) -> str:
    return (f"## Strengths\n- The {topic} model {VERBS[r]} on {topic} benchmarks with care.\n"
            f"## Weaknesses\n- {CONCERNS[r]} for the {topic} experiments in this work.\n- Too short.")


def _reviews(n_papers: int = 6) -> pl.DataFrame:
    return pl.DataFrame([{"paper_id": f"p{p}", "review_id": f"p{p}-r{r}", "review_text": _review(TOPICS[p], r)}
                         for p in range(n_papers) for r in range(3)])


def test_units_are_sentences_or_the_points_of_a_score_run() -> None:
    assert sentences("## Weaknesses\n- **An ablation** is missing for the graph model. Too short. Fine.") == \
        ["An ablation is missing for the graph model."]
    units, unit = exam_units(_reviews(2), None)
    assert unit == "sentences" and units.height == 2 * 3 * 2            # "Too short." is under six words
    points = pl.DataFrame({"review_id": ["p0-r0", "p0-r1", "p0-r1", "cand-1", "p0-r2"],
                           "paper_id": ["p0"] * 5, "source": ["human", "human", "human", "gen-a", "human"],
                           "field": ["weaknesses", "strengths", "questions", "weaknesses", "strengths"],
                           "position": [0, 0, 0, 0, 0], "text": ["w0", "s1", "q1", "c", "s2"]})
    units, unit = exam_units(_reviews(2), points)
    assert unit == "points" and units["text"].to_list() == ["w0", "s1", "s2"]   # human strengths / weaknesses
    assert exam_units(_reviews(2), points.filter(pl.col("source") != "human"))[1] == "sentences"


def test_the_matcher_exam_is_drawn_from_curated_reviews() -> None:
    units, _ = exam_units(_reviews(), None)
    groups = {f"p{p}": "A" if p < 3 else "B" for p in range(6)}
    questions = draw_match_exam(units, groups, n_items=4, seed=1)
    assert len(questions) == 4 * 5 * 2 and draw_match_exam(units, groups, 4, 1) == questions
    topic = {f"p{p}": TOPICS[p] for p in range(6)}
    for q in questions:
        mine = topic[q.paper_id]
        assert mine in q.a.lower() or mine in q.b.lower()
        if q.set == "pertinence" and q.target:          # the point and its plain restatement
            assert q.b == q.a.lower() or q.a == q.b.lower()
        elif q.set in ("pertinence", "easy"):           # against another paper of the same venue
            other = q.b if mine in q.a else q.a
            assert mine not in other and q.target is False
            other_topic = next(t for t in TOPICS if t in other)
            assert groups[f"p{TOPICS.index(other_topic)}"] == groups[q.paper_id]
            assert other.startswith("**Key point.**") == (q.set == "pertinence")
        else:                                           # consistency, hard (no rewriter): two points of the paper
            assert mine in q.a and mine in q.b and q.a != q.b and q.target is None
    first, swapped = questions[0], questions[1]
    assert (first.a, first.b) == (swapped.b, swapped.a) and (first.order, swapped.order) == (0, 1)
    # a rewriter's polish and rephrasing replace the deterministic ones; the hard set then counts a match
    rewritten = draw_match_exam(units, groups, 2, 1, lambda version, texts: [f"{version}: {t}" for t in texts])
    assert {q.b for q in rewritten if q.set == "pertinence" and not q.target and q.order == 0} <= \
        {q.b for q in rewritten if q.b.startswith("qualify-polish-point-v1: ")}
    assert all(q.b.startswith("qualify-rephrase-v1: ") and q.target for q in rewritten if q.set == "hard" and q.order == 0)
    assert polish_point("the ablation is missing") == "**Key point.** The ablation is missing."
    with pytest.raises(ValueError, match="two papers"):
        draw_match_exam(units.filter(pl.col("paper_id") == "p0"), groups, 4, 0)


def _pq(kind: str, item: int, order: int, target: bool | None = None) -> PointQuestion:
    a, b = f"{kind} {item} a", f"{kind} {item} b"
    return PointQuestion(kind, item, order, "p", *((a, b) if order == 0 else (b, a)), target)   # type: ignore[arg-type]


def test_matcher_statistics_on_hand_worked_verdicts() -> None:
    qs = [_pq("consistency", 0, 0), _pq("consistency", 0, 1), _pq("easy", 0, 0, False), _pq("easy", 0, 1, False),
          _pq("hard", 0, 0), _pq("hard", 0, 1)]
    # consistency item: Yes / No (differs); easy: No / No (same); hard: Yes / unanswered (left out)
    verdicts = [Verdict(1, 0.9), Verdict(0, 0.8), Verdict(0, 0.9), Verdict(0, 0.7), Verdict(1, 0.6), Verdict(None, math.nan)]
    assert match_consistency(qs, verdicts) == (2, 0.5)
    again = [*qs, PointQuestion("hard", 1, 0, "p", "consistency 0 a", "consistency 0 b", None)]   # the same pair
    assert match_consistency(again, [*verdicts, Verdict(1, 0.9)]) == (2, 0.5)                   # counts once
    assert self_confidence(qs, verdicts) == (3, pytest.approx(0.8 - 0.6))
    pert = [_pq("pertinence", 0, 0, True), _pq("pertinence", 0, 1, True), _pq("pertinence", 1, 0, False),
            _pq("pertinence", 1, 1, False)]
    assert match_pertinence(pert, [Verdict(1, 1)] * 4) == (4, 0.5)                    # always Yes: chance
    assert match_pertinence(pert, [Verdict(1, 1), Verdict(1, 1), Verdict(0, 1), Verdict(None, math.nan)]) == (3, 1.0)
    assert parse_stated_match("Answer: Yes; Confidence: 4") == Verdict(1, 0.8)
    assert parse_stated_match("No.").choice == 0 and math.isnan(parse_stated_match("No.").confidence)
    assert parse_stated_match("Perhaps.").choice is None


def _points_shown(params: dict) -> tuple[str, str]:
    user = "\n".join(m["content"] if isinstance(m["content"], str) else m["content"][0]["text"]
                     for m in params["messages"] if m["role"] == "user")
    a = re.search(r"<point_a>\n(.*?)\n</point_a>", user, re.S).group(1)
    b = re.search(r"<point_b>\n(.*?)\n</point_b>", user, re.S).group(1)
    return a, b


def _topic(text: str) -> str | None:
    return next((t for t in TOPICS if t in text.lower()), None)


def matcher(params: dict) -> str:
    """careful: a match when both points are about the same topic and share half their words, sure when the
    topics differ or the words are (nearly) the same; always-yes: "Yes" whatever the points."""
    if params["model"] == "always-yes":
        return "Answer: Yes; Confidence: 3"
    assert "Confidence" in (params["system"] if isinstance(params["system"], str) else params["system"][0]["text"])
    a, b = _points_shown(params)
    wa, wb = (set(re.findall(r"[a-z]+", t.lower())) - {"key", "point"} for t in (a, b))
    overlap = len(wa & wb) / len(wa | wb)
    same = _topic(a) == _topic(b) and overlap >= 0.5
    sure = _topic(a) != _topic(b) or overlap >= 0.9
    return f"Answer: {'Yes' if same else 'No'}; Confidence: {5 if sure else 2}"


def _config(exam_pipeline, url: str, models: list[str], **qualify: str):
    matchers = "\n".join(f'[[pipelines.exam.score.review_quality.matchers]]\nbackend = "anthropic"\nmodel = "{m}"\n'
                         f"use_batches = false\nmax_retries = 0\n" for m in models)
    extra = "".join(f"{k} = {v}\n" for k, v in qualify.items())
    return exam_pipeline(["points_precision_weaknesses"], 4, qualify=extra, tables=matchers)


def _curate(cfg) -> None:
    curated = stage_dir(cfg, "exam", "curate", "GREBench.cc/2025/Demo")
    write_parquet(_reviews(), curated / "reviews.parquet")
    write_parquet(pl.DataFrame({"paper_id": [f"p{p}" for p in range(6)], "in_benchmark": [True] * 6,
                                "abstract": [f"We study {t} learning." for t in TOPICS]}), curated / "papers.parquet")


def test_known_matchers_through_the_server_drop_or_stop(tmp_path, exam_pipeline, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    with AnthropicServer(matcher) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        cfg = _config(exam_pipeline, server.url, ["always-yes", "careful"])
        _curate(cfg)
        assert [(s.role, s.name) for s in seats(cfg)] == [("matcher", "anthropic/always-yes"),
                                                          ("matcher", "anthropic/careful")]
        summary = qualify(cfg, "exam")
        calls = server.counts["messages"]
        # two matchers, 4 items x 5 pairs x 2 orders; without a rewriter the hard pair is the consistency pair (cached)
        assert calls == 2 * 4 * 4 * 2
        with pytest.raises(QualificationFailed, match="always-yes failed pertinence"):
            qualify(cfg.model_copy(update={"qualify": cfg.qualify.model_copy(update={"on_fail": "stop"})}), "exam")
        assert server.counts["messages"] == calls              # answers cached
        table = pl.read_parquet(stage_dir(cfg, "exam", "qualify") / "qualification.parquet")
        got = {(m, t): (n, s, p) for m, t, n, s, p in table.select("model", "test", "n", "score", "passed").iter_rows()}
        assert got[("anthropic/careful", "consistency")] == (16, 1.0, True)     # 4 items x 4 distinct pairs
        assert got[("anthropic/careful", "pertinence")] == (16, 1.0, True)
        assert got[("anthropic/careful", "self_confidence")] == (16, 1.0, True)   # P_s: 5/5 beats 2/5
        assert got[("anthropic/always-yes", "consistency")] == (16, 1.0, True)
        assert got[("anthropic/always-yes", "pertinence")] == (16, 0.5, False)
        assert got[("anthropic/always-yes", "self_confidence")] == (16, 0.0, False)
        assert (table["role"] == "matcher").all() and (table["confidence"] == "stated").all()
        assert summary.details["matcher_units"] == "sentences"
        assert summary.details["qualified"] == {"matcher:anthropic/always-yes": False, "matcher:anthropic/careful": True}
        kept = qualified_config(cfg, "exam").score.review_quality.matchers
        assert [m.model for m in kept] == ["careful"]             # the first qualified matcher now matches
        _the_table_in_duckdb(cfg)
        # a lone matcher that fails leaves the role empty: the run stops
        lone = _config(exam_pipeline, server.url, ["always-yes"])
        with pytest.raises(QualificationFailed, match="no model in the matcher role"):
            qualify(lone, "exam")
        with pytest.raises(QualificationFailed, match="only model"):
            qualified_config(lone, "exam")


def test_a_matcher_apart_from_the_points_llm_matches_and_is_named(tmp_path, monkeypatch) -> None:
    """`[score.review_quality] matchers`: the work's matcher answers the match questions (the points LLM
    only splits the reviews), and the points_* rows name both."""
    from tasks.core.config import LLMConfig
    from tasks.lm import make_lm
    from tasks.metrics import Resources, score_with_tables
    from tasks.metrics.review_quality.work import QualitySettings, QualityWork
    from tests.metrics.test_review_quality import bag_of_words, inputs, responder

    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    refs, cands, facts, syn = inputs()
    points_cfg, match_cfg = (LLMConfig(backend="anthropic", model=m, use_batches=False, max_retries=0)
                             for m in ("claude-points", "claude-matcher"))
    with AnthropicServer(responder) as server:
        work = QualityWork(QualitySettings(match_top_k=1), facts, make_lm(points_cfg, tmp_path, base_url=server.url),
                           matcher=make_lm(match_cfg, tmp_path, base_url=server.url))
        scored = score_with_tables(["points_precision_weaknesses", "focus_kl_weaknesses"], cands, refs, syn,
                                   Resources("lm", embed=bag_of_words, quality=work))
        scores = scored.scores
        asked = [(body["model"], "<point_a>" in user_text(body)) for body in server.received]
    assert {m for m, is_match in asked if is_match} == {"claude-matcher"}
    assert {m for m, is_match in asked if not is_match} == {"claude-points"}
    assert (scored.tables["point_matches"]["model"] == "anthropic/claude-matcher").all()
    names = dict(scores.select("metric", "eval_lm").unique().iter_rows())
    # a top-1 prefilter: the precision is a lower bound, and its predictor says so
    assert names == {"points_precision_weaknesses": "anthropic/claude-points|matcher:anthropic/claude-matcher"
                                                    "|prefilter top-1, lower bound",
                     "focus_kl_weaknesses": "anthropic/claude-points"}
    assert scores.filter((pl.col("candidate") == "modelA/p0") & (pl.col("metric") == "points_precision_weaknesses")
                         )["score"].item() == pytest.approx(2 / 3)


def _the_table_in_duckdb(cfg) -> None:
    """The matcher rows through the qualification staging and mart SQL, and its data test."""
    import duckdb

    from tasks.core.layout import pipeline_dir
    from tasks.stages.materialize.build import SQL_DIR, BuildResult, _run_layers

    con = duckdb.connect()
    _run_layers(con, pipeline_dir(cfg, "exam"), {"pipeline": "exam"}, SQL_DIR, BuildResult(database=cfg.database),
                {"staging.qualification", "qualification"})
    rows = con.execute("SELECT role, model, bool_and(qualified) FROM qualification GROUP BY ALL ORDER BY model").fetchall()
    assert rows == [("matcher", "anthropic/always-yes", False), ("matcher", "anthropic/careful", True)]
    assert con.execute((SQL_DIR / "tests" / "qualification_rows.sql").read_text()).fetchall() == []
