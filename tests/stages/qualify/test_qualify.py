"""The qualify stage: the exam's statistics on hand-worked verdicts, the questions drawn from curated
reviews, and judges of known behaviour through the local Anthropic- and OpenAI-compatible servers
with the real client libraries (the whole stage, then the panel it leaves to the score stage)."""

from __future__ import annotations

import math
import re

import numpy as np
import polars as pl
import pytest

from tasks.core.config import QualifyConfig
from tasks.core.layout import stage_dir, write_parquet
from tasks.lm import eval_specs
from tasks.stages.qualify.exam import Question, draw_exam, plain, polish
from tasks.stages.qualify.examinee import ReadoutExaminee, Verdict, from_probabilities, parse_stated
from tasks.stages.qualify.grade import consistency, exam_scores, grade, pertinence, self_confidence
from tasks.stages.qualify.stage import (
    QualificationFailed,
    Seat,
    answerer,
    fusion_weights,
    qualified_config,
    qualify,
    seats,
    sit_exam,
)
from tasks.testing.anthropic_server import AnthropicServer, user_text
from tasks.testing.openai_server import OpenAIServer

TOPICS = ["graph", "protein", "robot", "speech", "vision", "climate"]


def _q(kind: str, item: int, order: int, target: int | None = None) -> Question:
    return Question(kind, item, order, "p", "s", "a", "b", target)


def test_consistency_on_hand_worked_verdicts() -> None:
    qs = [_q("consistency", i, o) for i in range(4) for o in (0, 1)]
    # item 0: 1 then 2 (same review) ; item 1: 1 then 1 (position) ; item 2: 2 then 1 (same) ; item 3: unanswered
    choices = [1, 2, 1, 1, 2, 1, 1, None]
    verdicts = [Verdict(c, 0.9) for c in choices]
    assert consistency(qs, verdicts) == (3, pytest.approx(2 / 3))
    assert consistency(qs, [Verdict(1, 0.6)] * 8) == (4, 0.0)           # always "first": never the same review
    assert consistency(qs[:0], []) == (0, pytest.approx(math.nan, nan_ok=True))


def test_pertinence_and_self_confidence_on_hand_worked_verdicts() -> None:
    qs = [_q("pertinence", 0, 0, 1), _q("pertinence", 0, 1, 2), _q("pertinence", 1, 0, 1), _q("pertinence", 1, 1, 2)]
    assert pertinence(qs, [Verdict(1, 1), Verdict(2, 1), Verdict(2, 1), Verdict(None, math.nan)]) == \
        (3, pytest.approx(2 / 3))
    assert pertinence(qs, [Verdict(1, 1)] * 4) == (4, 0.5)               # always "first": chance
    sets = [_q("easy", 0, 0, 1), _q("easy", 0, 1, 2), _q("hard", 0, 0, 1), _q("hard", 0, 1, 2)]
    # easy 0.9, 0.7 -> 0.8 ; hard 0.6 and an unanswered one -> 0.6 ; difference 0.2 on 3 answers
    got = self_confidence(sets, [Verdict(1, 0.9), Verdict(2, 0.7), Verdict(1, 0.6), Verdict(None, math.nan)])
    assert got == (3, pytest.approx(0.2))
    assert self_confidence(sets, [Verdict(1, 0.6)] * 4) == (4, 0.0)      # constant confidence: no difference
    assert math.isnan(self_confidence(sets[:2], [Verdict(1, 1.0)] * 2)[1])   # no hard set: no score


def test_pass_lines_mean_of_the_role_and_chance() -> None:
    rows = [("a", "judge", "consistency", 10, 1.0), ("b", "judge", "consistency", 10, 0.5),
            ("c", "judge", "consistency", 10, 0.9), ("a", "judge", "pertinence", 20, 0.55),
            ("b", "judge", "pertinence", 20, 0.45), ("c", "judge", "pertinence", 20, math.nan),
            ("a", "judge", "self_confidence", 20, 0.1), ("b", "judge", "self_confidence", 20, 0.0),
            ("lone", "oracle", "consistency", 10, 0.5)]
    scores = pl.DataFrame([{"model": m, "role": r, "test": t, "n": n, "score": s, "confidence": "stated"}
                           for m, r, t, n, s in rows])
    table = grade(scores, QualifyConfig())
    by = {(m, r, t): (th, p) for m, r, t, th, p in table.select("model", "role", "test", "threshold", "passed").iter_rows()}
    assert by[("a", "judge", "consistency")] == (pytest.approx(0.8), True)     # mean of 1.0, 0.5, 0.9
    assert by[("b", "judge", "consistency")] == (pytest.approx(0.8), False)
    assert by[("c", "judge", "consistency")] == (pytest.approx(0.8), True)
    assert by[("a", "judge", "pertinence")] == (pytest.approx(0.5), True)      # NaN left out of the mean
    assert by[("b", "judge", "pertinence")][1] is False and by[("c", "judge", "pertinence")][1] is False
    assert by[("a", "judge", "self_confidence")] == (0.0, True) and by[("b", "judge", "self_confidence")][1] is False
    confident = table.filter(pl.col("test") == "self_confidence").select("model", "score", "raw_score").rows()
    assert confident == [("a", 1.0, 0.1), ("b", 0.0, 0.0)]                 # P_s is 0 or 1; the difference kept
    assert by[("lone", "oracle", "consistency")] == (0.5, False)            # its own mean, but not above chance
    fixed = grade(scores, QualifyConfig(consistency_threshold=0.95))
    assert fixed.filter(pl.col("test") == "consistency")["passed"].to_list() == [True, False, False, False]


def test_auto_pre_weights_on_a_hand_made_exam() -> None:
    """Two judges on one hand-made exam: two consistency items, two pertinence questions and an easy and
    a hard question each. P_s is 1 only where the easy set's confidence beats the hard set's; the
    fusion weight is the mean of P_c, P_p and P_s, and the raw figures stay beside the scores."""
    qs = [_q("consistency", 0, 0), _q("consistency", 0, 1), _q("consistency", 1, 0), _q("consistency", 1, 1),
          _q("pertinence", 0, 0, 1), _q("pertinence", 0, 1, 2),
          _q("easy", 0, 0, 1), _q("hard", 0, 0, 1)]
    # "sure": same review both times on item 0 only (P_c 1/2), both relevant reviews chosen (P_p 1),
    # surer on the easy question (0.9 vs 0.6): P_s 1 -> weight (0.5 + 1 + 1) / 3
    sure = [Verdict(1, 0.8), Verdict(2, 0.8), Verdict(1, 0.8), Verdict(1, 0.8), Verdict(1, 0.8), Verdict(2, 0.8),
            Verdict(1, 0.9), Verdict(1, 0.6)]
    # "odd": consistent on both items (P_c 1), half the pertinence right (P_p 1/2), barely surer on the
    # hard question (0.7 vs 0.7025): P_s 0 -> weight (1 + 0.5 + 0) / 3 = 0.5
    odd = [Verdict(1, 0.5), Verdict(2, 0.5), Verdict(2, 0.5), Verdict(1, 0.5), Verdict(1, 0.5), Verdict(1, 0.5),
           Verdict(1, 0.7), Verdict(1, 0.7025)]
    rows = [{"model": m, "role": "judge", "test": t, "n": n, "score": s, "confidence": "readout"}
            for m, verdicts in (("sure", sure), ("odd", odd))
            for t, (n, s) in exam_scores(qs, verdicts).items()]
    table = grade(pl.DataFrame(rows), QualifyConfig())
    got = {(m, t): (s, r) for m, t, s, r in table.select("model", "test", "score", "raw_score").iter_rows()}
    assert got[("sure", "consistency")] == (0.5, 0.5) and got[("odd", "consistency")] == (1.0, 1.0)
    assert got[("sure", "pertinence")] == (1.0, 1.0) and got[("odd", "pertinence")] == (0.5, 0.5)
    assert got[("sure", "self_confidence")] == (1.0, pytest.approx(0.3))
    assert got[("odd", "self_confidence")] == (0.0, pytest.approx(-0.0025))
    weights = fusion_weights(table, ["sure", "odd"])
    assert weights == {"odd": pytest.approx(0.5), "sure": pytest.approx(2.5 / 3)}
    # the old rule (the mean of the raw figures) would have given "odd" (1 + 0.5 - 0.0025) / 3
    assert weights["odd"] != pytest.approx(table.filter(pl.col("model") == "odd")["raw_score"].mean())


def test_answers_are_read_or_left_out() -> None:
    assert parse_stated("Answer: 2; Confidence: 4") == Verdict(2, 0.8)
    assert parse_stated("Review 1") .choice == 1 and math.isnan(parse_stated("Review 1").confidence)
    assert parse_stated("I cannot decide.").choice is None
    assert from_probabilities(0.3, 0.1) == Verdict(1, pytest.approx(0.75))
    assert from_probabilities(0.0, 0.0).choice is None


def _review(topic: str, r: int) -> str:
    extra = " The writing is clear." * r      # reviews of one paper differ in length, never in topic mentions
    return f"## Summary\nThe {topic} model is tested on {topic} data.\n- However the {topic} ablation is missing.{extra}"


def _reviews(n_papers: int = 6, judged: bool = True) -> pl.DataFrame:
    rows = [{"paper_id": f"p{p}", "review_id": f"p{p}-r{r}", "review_text": _review(TOPICS[p], r),
             "judgments": f"The reviewer criticizes that the {TOPICS[p]} ablation is missing.\n"
                          f"The reviewer appreciates that the {TOPICS[p]} model is tested."}
            for p in range(n_papers) for r in range(3)]
    return pl.DataFrame(rows).drop([] if judged else ["judgments"])


def test_the_exam_is_drawn_from_curated_reviews() -> None:
    reviews = _reviews()
    synopses = {f"p{p}": f"We study {TOPICS[p]} learning." for p in range(6)}
    groups = {f"p{p}": "A" if p < 3 else "B" for p in range(6)}
    questions = draw_exam(reviews, synopses, groups, n_items=4, seed=1)
    assert len(questions) == 4 * 5 * 2 and draw_exam(reviews, synopses, groups, 4, 1) == questions
    assert len(draw_exam(reviews.drop("judgments"), synopses, groups, 4, 1)) == 4 * 4 * 2   # no statements
    statements = [q for q in questions if q.ask == "supports"]
    assert len(statements) == 8 and {q.set for q in statements} == {"consistency"}
    assert {q.item for q in statements} == {4, 5, 6, 7}            # items of their own, after the first kind
    assert all(q.statement in reviews["judgments"].str.split("\n").explode().to_list() for q in statements)
    topic = {f"p{p}": TOPICS[p] for p in range(6)}
    for q in questions:
        mine = topic[q.paper_id]
        if q.set == "pertinence":
            relevant, other = (q.first, q.second) if q.target == 1 else (q.second, q.first)
            assert relevant == relevant.lower() and "#" not in relevant and mine in relevant
            assert mine not in other and other.startswith("## Review") and len(other) > len(relevant)
            other_topic = next(t for t in TOPICS if t in other)
            assert groups[f"p{TOPICS.index(other_topic)}"] == groups[q.paper_id]   # same venue
        elif q.set == "easy":
            assert (mine in q.first) != (mine in q.second)
        else:                                   # consistency, hard (no rewriter): two reviews of the paper
            assert mine in q.first and mine in q.second and q.first != q.second
    first, swapped = questions[0], questions[1]
    assert (first.first, first.second) == (swapped.second, swapped.first) and first.order == 0 and swapped.order == 1
    assert plain("## Strengths\n- **Clear** idea.\n1. Good") == "strengths clear idea. good"
    assert polish("One point. Another point.").startswith("## Review")
    with pytest.raises(ValueError, match="two papers"):
        draw_exam(reviews.filter(pl.col("paper_id") == "p0"), synopses, groups, 4, 0)


def test_one_models_readout_behind_two_seats_sits_the_exam_once(exam_pipeline) -> None:
    """The embedded LM as the local judge and as the oracle's readout: two seats, one answerer, so the
    exam is answered once and both roles get the same rows (the demo answered it twice: 20 s of 43)."""
    cfg = exam_pipeline(["llm_judge", "tv_fvar_statement"], 1)
    seated = seats(cfg)
    assert sorted((s.role, s.name) for s in seated) == [("judge", "local/smollm2"),
                                                       ("oracle", f"readout:{eval_specs(cfg.score)[0].resolved().key}")]
    assert len({answerer(s) for s in seated}) == 1
    questions = draw_exam(_reviews(), {f"p{p}": f"We study {TOPICS[p]} learning." for p in range(6)},
                          {f"p{p}": "A" for p in range(6)}, n_items=2, seed=3)
    asked = []

    def longer_first(prompts, answers):   # a readout of known behaviour: surer the longer the first review
        asked.append(len(prompts))
        first = np.array([len(user.split("<review>")[1]) for _, user in prompts], dtype=float)
        second = np.array([len(user.split("<review>")[2]) for _, user in prompts], dtype=float)
        return np.stack([first, second], axis=1) / (first + second)[:, None]

    made = []

    def make(seat):
        made.append(seat.name)
        return ReadoutExaminee(seat.name, longer_first)

    table = sit_exam(questions, seated, make)
    assert len(made) == 1 and asked == [len(questions)]
    by_role = {role: frame.drop("role", "model").sort("test") for (role,), frame in table.group_by("role")}
    assert set(by_role) == {"judge", "oracle"} and by_role["judge"].equals(by_role["oracle"])
    other = [Seat("matcher", "matcher", llm=seated[0].llm)]      # a matcher's exam is its own
    assert answerer(other[0]) == "matcher"


def _shown(params: dict) -> tuple[str, str, str]:
    user = user_text(params)
    synopsis = re.search(r"We study (\w+) learning", user).group(1)
    one, two = re.findall(r"<review>\n(.*?)\n</review>", user, re.S)
    return synopsis, one, two


def always_first(params: dict) -> str:
    return "Answer: 1; Confidence: 3"


def always_longer(params: dict) -> str:
    _, one, two = _shown(params)
    return f"Answer: {1 if len(one) >= len(two) else 2}; Confidence: 4"


def careful(params: dict) -> str:
    """Picks the review that talks about the synopsis's topic (for a statement: shares more of its words;
    the longer one on a tie); sure only when one review is off topic."""
    topic, one, two = _shown(params)
    statement = re.search(r"### Statement\n(.*)\n", user_text(params))
    if statement:
        words = set(re.findall(r"\w+", statement.group(1).lower()))
        a, b = (len(words & set(re.findall(r"\w+", r.lower()))) for r in (one, two))
    else:
        a, b = one.lower().count(topic), two.lower().count(topic)
    choice = (1 if a > b else 2) if a != b else (1 if len(one) >= len(two) else 2)
    return f"Answer: {choice}; Confidence: {5 if a != b else 2}"


def _pipeline(exam_pipeline, anthropic_url: str, first_url: str, longer_url: str, **qualify: str) -> object:
    judges = "\n".join(
        f'[[pipelines.exam.score.judges]]\nbackend = "{b}"\nmodel = "{m}"\nuse_batches = false\nmax_retries = 0\n'
        + (f'base_url = "{u}"\napi_key_env = ""\n' if b == "openai" else "")
        for b, m, u in (("anthropic", "careful", None), ("openai", "first", first_url), ("openai", "longer", longer_url)))
    extra = "".join(f"{k} = {v}\n" for k, v in qualify.items())
    return exam_pipeline(["llm_judge_noref"], 5, qualify=extra, tables=judges)


def test_known_judges_through_the_servers_and_the_panel_left_to_score(tmp_path, exam_pipeline, monkeypatch) -> None:
    """The careful judge qualifies; always-first (consistency 0, pertinence 0.5) and always-longer
    (pertinence 0) fail, and neither states a confidence that follows difficulty; the score stage's panel
    keeps the careful judge alone. With on_fail = "stop" the same exam stops the run."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    with AnthropicServer(careful) as good, OpenAIServer(always_first) as first, OpenAIServer(always_longer) as longer:
        cfg = _pipeline(exam_pipeline, good.url, first.base_url, longer.base_url)
        reviews = _reviews()
        curated = stage_dir(cfg, "exam", "curate", "GREBench.cc/2025/Demo")
        write_parquet(reviews.drop("judgments"), curated / "reviews.parquet")
        write_parquet(pl.DataFrame({"review_id": reviews["review_id"].to_list() * 2, "position": [0] * 18 + [1] * 18,
                                    "text": reviews["judgments"].str.split("\n").list.get(0).to_list()
                                    + reviews["judgments"].str.split("\n").list.get(1).to_list()}),
                      stage_dir(cfg, "exam", "preprocess") / "judgments.parquet")
        write_parquet(pl.DataFrame({"paper_id": [f"p{p}" for p in range(6)], "in_benchmark": [True] * 6,
                                    "abstract": [f"We study {t} learning." for t in TOPICS]}), curated / "papers.parquet")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", good.url)
        summary = qualify(cfg, "exam")
        calls = good.counts["messages"], first.counts["chat"], longer.counts["chat"]
        with pytest.raises(QualificationFailed, match="longer"):
            qualify(cfg.model_copy(update={"qualify": cfg.qualify.model_copy(update={"on_fail": "stop"})}), "exam")
        assert (good.counts["messages"], first.counts["chat"], longer.counts["chat"]) == calls   # cached
        # on_fail = "report": the same exam stops nothing and every judge stays in the panel
        report = cfg.model_copy(update={"qualify": cfg.qualify.model_copy(update={"on_fail": "report"})})
        qualify(report, "exam")
        assert [j.model for j in qualified_config(report, "exam").score.judges] == ["careful", "first", "longer"]
    assert [s.name for s in seats(cfg)] == ["anthropic/careful", "openai/first", "openai/longer"]
    table = pl.read_parquet(stage_dir(cfg, "exam", "qualify") / "qualification.parquet")
    got = {(m, t): (n, s, p) for m, t, n, s, p in table.select("model", "test", "n", "score", "passed").iter_rows()}
    assert got[("anthropic/careful", "consistency")] == (10, 1.0, True)      # 5 informative + 5 statement items
    assert got[("anthropic/careful", "pertinence")] == (10, 1.0, True)
    assert got[("anthropic/careful", "self_confidence")] == (20, 1.0, True)   # P_s: 5/5 beats 2/5
    raw = dict(zip(zip(table["model"], table["test"], strict=True), table["raw_score"], strict=True))
    assert raw[("anthropic/careful", "self_confidence")] == pytest.approx(0.6)
    assert got[("openai/first", "consistency")] == (10, 0.0, False)
    assert got[("openai/first", "pertinence")] == (10, 0.5, False)
    assert got[("openai/longer", "consistency")][1:] == (1.0, True)
    assert got[("openai/longer", "pertinence")] == (10, 0.0, False)
    for model in ("openai/first", "openai/longer"):
        assert got[(model, "self_confidence")] == (20, 0.0, False)
    assert (table["role"] == "judge").all() and (table["confidence"] == "stated").all()
    assert table.filter(pl.col("test") == "consistency")["threshold"].to_list() == [pytest.approx(2 / 3)] * 3
    assert summary.details["qualified"] == {"judge:anthropic/careful": True, "judge:openai/first": False,
                                            "judge:openai/longer": False}
    assert summary.llm_calls == sum(calls) and (stage_dir(cfg, "exam", "qualify") / "usage.parquet").is_file()
    kept = qualified_config(cfg, "exam").score.judges
    assert [j.model for j in kept] == ["careful"]
    lone = cfg.model_copy(update={"score": cfg.score.model_copy(update={"judges": (),
                                                                       "oracle": cfg.score.judges[1]})})
    with pytest.raises(QualificationFailed, match="only model"):   # a failed judge with no panel to leave
        qualified_config(lone, "exam")
    other = cfg.model_copy(update={"score": cfg.score.model_copy(update={"oracle_predictor": "generate",
                                                                        "baselines": ("llm_judge", "tvd_mi")})})
    with pytest.raises(QualificationFailed, match="not examined"):   # the config changed since the exam
        qualified_config(other, "exam")
    # the table in DuckDB (its staging and mart SQL alone, in memory)
    import duckdb

    from tasks.core.layout import pipeline_dir
    from tasks.stages.materialize.build import SQL_DIR, BuildResult, _run_layers

    con = duckdb.connect()
    _run_layers(con, pipeline_dir(cfg, "exam"), {"pipeline": "exam"}, SQL_DIR, BuildResult(database=cfg.database),
                {"staging.qualification", "qualification"})
    rows = con.execute("SELECT model, bool_and(qualified) FROM qualification GROUP BY ALL ORDER BY model").fetchall()
    assert rows == [("anthropic/careful", True), ("openai/first", False), ("openai/longer", False)]
    data_test = (SQL_DIR / "tests" / "qualification_rows.sql").read_text()
    assert con.execute(data_test).fetchall() == []
    con.execute("INSERT INTO qualification SELECT * REPLACE ('umpire' AS role) FROM qualification LIMIT 1")
    assert len(con.execute(data_test).fetchall()) == 1


@pytest.mark.slow
def test_the_embedded_lm_sits_the_exam_end_to_end(tmp_path, exam_pipeline) -> None:
    """SmolLM2 as judge (the local backend, read by the logit readout): every question answered, scores in
    range, verdicts by the pass lines, and the run stops only when the role is left without a qualified model
    (the oracle role's readout seat is the same code path, on the evaluation LM)."""
    cfg = exam_pipeline(["llm_judge_noref"], 1)
    curated = stage_dir(cfg, "exam", "curate", "GREBench.cc/2025/Demo")
    write_parquet(_reviews(judged=False), curated / "reviews.parquet")
    write_parquet(pl.DataFrame({"paper_id": [f"p{p}" for p in range(6)], "in_benchmark": [True] * 6,
                                "abstract": [f"We study {t} learning." for t in TOPICS]}), curated / "papers.parquet")
    try:
        qualify(cfg, "exam")
        stopped = False
    except QualificationFailed:
        stopped = True
    table = pl.read_parquet(stage_dir(cfg, "exam", "qualify") / "qualification.parquet")
    assert set(zip(table["role"], table["model"], strict=True)) == {("judge", "local/smollm2")}
    assert (table["confidence"] == "readout").all()
    n = dict(zip(table["test"], table["n"], strict=False))
    assert n == {"consistency": 1, "pertinence": 2, "self_confidence": 4}      # every question answered
    for row in table.iter_rows(named=True):
        low, high = (-0.5, 0.5) if row["test"] == "self_confidence" else (0.0, 1.0)
        assert low <= row["raw_score"] <= high
        if row["test"] == "self_confidence":
            assert row["score"] == float(row["raw_score"] > 0)
        rule = row["raw_score"] > row["threshold"] if row["test"] == "self_confidence" else \
            row["score"] >= row["threshold"] - 1e-12 and row["score"] > 0.5
        assert row["passed"] == rule
    per_role = table.group_by("role").agg(pl.col("passed").all())
    assert stopped == (not per_role["passed"].all())


def test_a_rewriter_polishes_and_rephrases(tmp_path) -> None:
    """With [qualify.rewriter] (here behind the local OpenAI-compatible server) the irrelevant side of
    pertinence is its polished text and the hard set's second review its rephrasing; where it answers
    nothing, the deterministic edit stands in."""
    from tasks.core.config import LLMConfig
    from tasks.metrics.llm_log import LLMLog
    from tasks.stages.qualify.stage import rewriter

    def respond(body: dict) -> str:
        review = re.search(r"<review>\n(.*?)\n</review>", user_text(body), re.S).group(1)
        system = body["messages"][0]["content"]
        if "copy editor" in system and "polished" in system:
            return "" if "protein" in review else f"# A Polished Report\n\n{review}"
        return f"In other words: {review}"

    with OpenAIServer(respond) as server:
        cfg = LLMConfig(backend="openai", model="editor", base_url=server.base_url, api_key_env="", use_batches=False)
        log = LLMLog()
        questions = draw_exam(_reviews(), {}, {}, 6, 0, rewriter(cfg, tmp_path, log))
    for q in questions:
        if q.set == "pertinence" and q.order == 0:
            assert q.second.startswith("# A Polished Report") or (q.second.startswith("## Review")
                                                                  and "protein" in q.second)
        if q.set == "hard" and q.order == 0:
            assert q.second == f"In other words: {q.first}"
    assert {"qualify:qualify-polish-v1", "qualify:qualify-rephrase-v1"} == set(log.usage()["purpose"])
