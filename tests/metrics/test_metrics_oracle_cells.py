"""The LLM-oracle f-MI cells (report and statement level) and the LLM judges: hand-worked values from
made-up oracle answers, the readout predictor through the registry, and the generation predictor and
the judges through the local Anthropic-compatible server with the real client."""

from __future__ import annotations

import math
import re

import polars as pl
import pytest

from tasks.core.config import LLMConfig, ScoreConfig
from tasks.core.frames import human_candidates
from tasks.core.schema import REFERENCES, SCORES, SYNOPSES_WIDE, USAGE
from tasks.lm import make_lm
from tasks.metrics import NEEDS, REGISTRY, MissingResource, Resources, score_metrics
from tasks.metrics.judge import judge_user
from tasks.metrics.negatives import draw_negatives
from tasks.metrics.oracle_cells import CELLS, cell_score
from tasks.metrics.predictors import LOG_RATIOS, bins_from_probabilities, parse_bin, parse_critic
from tasks.metrics.rating import parse_rating
from tasks.testing.anthropic_server import AnthropicServer, system_text, user_text

LOG8 = math.log(8.0)
ORACLE_CELLS = ["kl_direct_report", "kl_fvar_report", "tv_direct_report", "tvd_mi",
                "gppm_judgment", "kl_fvar_statement", "tv_direct_statement", "tv_fvar_statement"]


def test_hand_worked_cells() -> None:
    kl_d, kl_f, tv_d, tv_f = (CELLS[n] for n in ("kl_direct_report", "kl_fvar_report", "tv_direct_report", "tvd_mi"))
    # r = 1 (bin 4, log r = 0) gives 0 for the direct cells, and for NWJ when the negatives also have r = 1
    assert cell_score(kl_d, [0.0], []) == 0.0 and cell_score(tv_d, [0.0], []) == 0.0
    assert cell_score(kl_f, [0.0], [[0.0], [0.0]]) == 0.0
    # statement level: the mean of the per-statement log ratios (bins 7 and 5: log 8 and log 2)
    assert cell_score(CELLS["gppm_judgment"], [LOG8, math.log(2)], []) == pytest.approx(2 * math.log(2))
    # NWJ: 1 + L(x, y) - mean exp L(x, y-): with L = log 8 and negatives at log 1/8 and log 1
    assert cell_score(kl_f, [LOG8], [[-LOG8], [0.0]]) == pytest.approx(1 + LOG8 - (1 / 8 + 1) / 2)
    # TV direct, joint form oriented to agreement: (1 - 1/r)+: r = 8 -> 7/8; r = 1/8 (contradiction) -> 0
    assert cell_score(tv_d, [LOG8], []) == pytest.approx(7 / 8)
    assert cell_score(tv_d, [-LOG8], []) == 0.0
    # TV f-variational: T(x, y) - mean T(x, y-), critics +-1/2, in [-1, 1]; negatives equal to the positive give 0
    assert cell_score(tv_f, [0.5], [[-0.5], [-0.5]]) == 1.0 and cell_score(tv_f, [-0.5], [[0.5]]) == -1.0
    assert cell_score(tv_f, [0.5], [[0.5], [-0.5]]) == 0.5
    stmt = CELLS["tv_fvar_statement"]
    assert cell_score(stmt, [0.5, -0.5, 0.5], [[0.5, -0.5, 0.5]]) == pytest.approx(0.0)
    assert cell_score(stmt, [0.5, 0.5, -0.5], [[-0.5, -0.5], [0.5]]) == pytest.approx(1 / 6 - 0.0)


def test_answer_parsing_records_gaps_rather_than_guessing() -> None:
    assert parse_critic("Yes.") == 0.5 and parse_critic(" no") == -0.5 and parse_critic("Answer: YES") == 0.5
    assert math.isnan(parse_critic("Maybe")) and math.isnan(parse_critic("")) and math.isnan(parse_critic("nothing"))
    assert parse_bin("7") == pytest.approx(LOG8) and parse_bin("Rating: 4") == 0.0 and parse_bin("1.") == -LOG8
    assert math.isnan(parse_bin("9")) and math.isnan(parse_bin("3.5")) and math.isnan(parse_bin("none"))
    assert parse_rating("Score: 7") == 7.0 and parse_rating("score 10") == 10.0 and parse_rating("I give 6/10") == 6.0
    assert math.isnan(parse_rating("Score: 12")) and math.isnan(parse_rating("good review"))
    assert parse_rating(" 7.") == 7.0 and parse_rating("Score: 7.5/10") == 7.5
    # a range echoed from the prompt, or a number that is not a rating, is no answer
    assert math.isnan(parse_rating("Score: 0-10 The candidate review is fine"))
    assert math.isnan(parse_rating("### Human review 1\nThe paper is clear"))
    # readout over the bins: uniform -> expected log r = 0; all mass on bin 7 -> log 8; no mass -> NaN
    got = bins_from_probabilities([[1 / 7] * 7, [0, 0, 0, 0, 0, 0, 0.2], [0] * 7])
    assert got[0] == pytest.approx(0.0) and got[1] == pytest.approx(LOG8) and math.isnan(got[2])
    assert LOG_RATIOS[3] == 0.0


def _refs(n_papers: int, n_reviews: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """References whose judgment lines name their paper ("point p.r.i"); three per review."""
    rows = [{"paper_id": f"paper{p}", "review_id": f"paper{p}-r{r}", "review_text": f"Review {r} of paper {p}.",
             "judgments": "\n".join(f"The reviewer questions point {p}.{r}.{i}." for i in range(3))}
            for p in range(n_papers) for r in range(n_reviews)]
    syn = pl.DataFrame([{"paper_id": f"paper{p}", "abstract": f"Abstract of paper {p}.", "assw": None}
                        for p in range(n_papers)], schema=SYNOPSES_WIDE)
    return pl.DataFrame(rows, schema=REFERENCES), syn


def _same_paper(user: str) -> bool:
    """Whether the candidate block and the target block of a question are about the same paper."""
    papers = [set(re.findall(r"point (\d+)\.", part)) for part in re.split(r"### (?:Statement|Target|Assessment B)", user)]
    return bool(papers[0] & papers[1])


def _fake_readouts(asked: list[str]):
    def readout(requests: pl.DataFrame) -> pl.DataFrame:
        asked.append("critic")
        same = [_same_paper(u) for u in requests["user"]]
        return pl.DataFrame({"key": requests["key"], "p_yes": [0.6 if s else 0.2 for s in same],
                             "p_no": [0.2 if s else 0.6 for s in same]})

    def read_answers(prompts, answers):
        asked.append("bins")
        assert list(answers) == ["1", "2", "3", "4", "5", "6", "7"]
        return [[0, 0, 0, 0, 0, 0.5, 0.5] if _same_paper(u) else [1, 0, 0, 0, 0, 0, 0] for _, u in prompts]
    return readout, read_answers


def test_every_oracle_cell_through_the_registry_with_the_readout() -> None:
    refs, syn = _refs(n_papers=3, n_reviews=2)
    cands = human_candidates(refs)
    negatives = draw_negatives(cands, refs, 2, seed=0)
    asked: list[str] = []
    readout, read_answers = _fake_readouts(asked)
    scores = score_metrics(ORACLE_CELLS, cands, refs, syn, Resources("lm", readout=readout, read_answers=read_answers),
                           negatives=negatives)
    assert scores.schema == SCORES and scores.height == 6 * len(ORACLE_CELLS)
    assert asked == ["critic", "bins"]      # one readout per kind of question, every cell served
    assert scores["reason"].is_null().all() and (scores["eval_lm"] == "readout:lm").all()
    by = dict(scores.group_by("metric").agg(pl.col("score").mean()).iter_rows())
    same = 2.5 * math.log(2)      # expected log r of the readout on a same-paper pair (bins 6 and 7: r = 4, 8)
    for level in ("report", "statement"):
        # critic q = 0.75 vs 0.25: t = +-1/4, negatives (other papers) at -1/4
        assert by["tvd_mi" if level == "report" else "tv_fvar_statement"] == pytest.approx(0.5)
        assert by[f"kl_fvar_{level}"] == pytest.approx(1 + same - 1 / 8)
        assert by[f"tv_direct_{level}"] == pytest.approx(1 - math.exp(-same))
    assert by["kl_direct_report"] == pytest.approx(same) and by["gppm_judgment"] == pytest.approx(same)
    for name in ORACLE_CELLS:
        meta = REGISTRY[name]
        assert meta.needs.name == "llm_oracle" and meta.negatives == (CELLS[name].e == "fvar") and meta.higher_is_better
    with pytest.raises(MissingResource):        # the generation oracle asked for, but no generation backend
        score_metrics(["tvd_mi"], cands, refs, syn, Resources("lm", readout=readout, oracle="generate"),
                      negatives=negatives)


def _responder(params: dict) -> str:
    """A made-up oracle and judge: yes / bin 7 for same-paper questions, no / bin 1 otherwise; one
    report-level bins question answered with nothing usable; the judge gives 8 with references, 3 without."""
    system, user = system_text(params), user_text(params)
    if "Rate the candidate review" in user:
        return "Score: 8" if "### Human review" in user else "Score: 3"
    if "whole assessment" in user and "point 0.0.0" in user.split("### Target")[-1] and "point 0.1.0" in user:
        return "I cannot tell."                               # candidate paper0-r1 vs reference paper0-r0
    if "1 = " in system:
        return "7" if _same_paper(user) else "1"
    return "Yes" if _same_paper(user) else "No"


def test_generation_oracle_and_judges_through_the_anthropic_server(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    refs, syn = _refs(n_papers=3, n_reviews=2)
    cands = human_candidates(refs)
    negatives = draw_negatives(cands, refs, 2, seed=0)
    cfg = LLMConfig(backend="anthropic", model="claude-test", use_batches=False, max_retries=0,
                    input_price_per_mtok=1.0, output_price_per_mtok=5.0)
    names = ["tvd_mi", "kl_direct_report", "gppm_judgment", "tv_fvar_statement", "llm_judge", "llm_judge_noref"]
    with AnthropicServer(_responder) as server:
        llm = make_lm(cfg, tmp_path, base_url=server.url)
        resources = Resources("lm", llm=llm, oracle="generate")
        scores = score_metrics(names, cands, refs, syn, resources, negatives=negatives)
        calls = server.counts["messages"]
        again = score_metrics(names, cands, refs, syn, Resources("lm", llm=llm, oracle="generate"), negatives=negatives)
        assert server.counts["messages"] == calls            # cached: a rerun makes no call
    assert again.equals(scores)
    oracle = scores.filter(pl.col("metric") != "llm_judge").filter(pl.col("metric") != "llm_judge_noref")
    assert (oracle["eval_lm"] == "generate:anthropic/claude-test").all()
    by = {(m, c, r): (s, why) for m, c, r, s, why in scores.select("metric", "candidate", "reference", "score", "reason").iter_rows()}
    # the unparsable answer is a gap with its reason, only where it was asked
    assert by[("kl_direct_report", "paper0-r1", "paper0-r0")] == (pytest.approx(math.nan, nan_ok=True), "oracle_unanswered")
    assert by[("kl_direct_report", "paper0-r0", "paper0-r1")] == (pytest.approx(LOG8), None)
    assert by[("tvd_mi", "paper0-r1", "paper0-r0")] == (1.0, None)    # yes vs no on both negatives
    assert by[("gppm_judgment", "paper2-r0", "paper2-r1")] == (pytest.approx(LOG8), None)
    assert by[("tv_fvar_statement", "paper1-r1", "paper1-r0")] == (1.0, None)
    judge = scores.filter(pl.col("metric") == "llm_judge")
    assert judge.height == 6 and (judge["score"] == 8.0).all() and (judge["eval_lm"] == "generate:anthropic/claude-test").all()
    free = scores.filter(pl.col("metric") == "llm_judge_noref")
    assert free.height == 6 and (free["score"] == 3.0).all() and free["reference"].is_null().all()
    # usage per purpose: calls, tokens and cost; the unparsed answer recorded with a null value
    usage = resources.log.usage()
    assert usage.schema == USAGE
    rows = {r["purpose"]: r for r in usage.iter_rows(named=True)}
    assert set(rows) == {"oracle:tv_fvar_statement+tvd_mi", "oracle:gppm_judgment+kl_direct_report",
                         "judge:llm_judge", "judge:llm_judge_noref"}
    assert rows["judge:llm_judge"]["requests"] == 6 and rows["judge:llm_judge"]["cost_usd"] > 0
    assert sum(r["requests"] - r["cached"] for r in rows.values()) == calls
    answers = resources.log.answers()
    assert answers.filter(pl.col("value").is_null())["answer"].to_list() == ["I cannot tell."]
    # the judge's prompt: synopsis, the references (its own review left out), the candidate
    user = judge_user("Abstract of paper 0.", "my review", ["first", "second"])
    assert user.index("Abstract") < user.index("### Human review 1\nfirst") < user.index("my review")


def test_config_chooses_the_oracle() -> None:
    from tasks.lm.lazy import LazyLM
    from tasks.metrics.resources import build_resources

    default = build_resources(ScoreConfig())
    assert default.oracle == "readout" and default.llm is None and default.provides(NEEDS["llm_oracle"])
    assert not default.provides(NEEDS["llm_judge"])
    cfg = ScoreConfig(oracle_predictor="generate", oracle=LLMConfig(backend="anthropic", model="claude-x"))
    chosen = build_resources(cfg, llm_cache=__import__("pathlib").Path("/nonexistent/never-built"))
    assert isinstance(chosen.llm, LazyLM) and chosen.llm.model == "claude-x" and chosen.provides(NEEDS["llm_oracle"])
    with pytest.raises(ValueError):
        ScoreConfig(oracle_predictor="guess")


def test_leaderboard_names_the_model_behind_each_column() -> None:
    from tasks.stages.validate.leaderboard import leaderboard

    rows = [("gem", "smollm2-key"), ("tvd_mi", "generate:anthropic/claude-x"), ("tv_fvar_statement", "readout:lm"),
            ("llm_judge", "anthropic/claude-x"), ("bleu", "sacrebleu")]
    scores = pl.DataFrame([{"paper_id": f"p{p}", "candidate": f"c{p}", "source": "m", "metric": m, "eval_lm": lm,
                            "score": float(p)} for m, lm in rows for p in range(3)])
    board = leaderboard(scores)
    assert dict(board.select("metric", "predictor").iter_rows()) == {
        "gem": "logprobs:smollm2-key", "tvd_mi": "generate:anthropic/claude-x", "tv_fvar_statement": "readout:lm",
        "llm_judge": "judge:anthropic/claude-x", "bleu": "none"}


def test_the_llm_log_lands_in_usage_files(tmp_path) -> None:
    from tasks.lm.types import ChatResult
    from tasks.metrics.llm_log import LLM_ANSWERS, LLMLog, write_llm_log

    log = LLMLog()
    assert write_llm_log(log, tmp_path)["llm_calls"] == 0 and not (tmp_path / "usage.parquet").exists()
    cfg = LLMConfig(backend="anthropic", input_price_per_mtok=1.0, output_price_per_mtok=5.0)
    log.record("judge:llm_judge", "anthropic", "m", cfg, ["a", "b"],
               [ChatResult("Score: 7", input_tokens=1000, output_tokens=10), ChatResult("x", cached=True)], [7.0, None])
    log.record("judge:llm_judge", "anthropic", "m", cfg, ["c"], [ChatResult("", error="overloaded")], [None])
    figures = write_llm_log(log, tmp_path)
    usage = pl.read_parquet(tmp_path / "usage.parquet")
    assert usage.schema == USAGE and usage.height == 1
    assert usage.row(0, named=True) | {"cost_usd": 0} == {
        "purpose": "judge:llm_judge", "backend": "anthropic", "model": "m", "requests": 3, "cached": 1, "errors": 1,
        "input_tokens": 1000, "output_tokens": 10, "cache_read_tokens": 0, "cache_write_tokens": 0, "cost_usd": 0}
    assert figures == {"llm_calls": 2, "input_tokens": 1000, "output_tokens": 10,
                       "cost_usd": pytest.approx(1000 / 1e6 + 10 * 5 / 1e6)}
    answers = pl.read_parquet(tmp_path / "llm_answers.parquet")
    assert answers.schema == LLM_ANSWERS and answers["value"].to_list() == [7.0, None, None]


@pytest.mark.slow
def test_oracle_cells_and_judge_on_the_embedded_lm(embedded_lm, tmp_path) -> None:
    """Both predictors and the judge on SmolLM2: every pair gets a bounded score or a recorded gap, the
    bin readout is a distribution over seven distinct tokens, and a rerun is served from the cache."""
    from tasks.metrics.resources import build_resources

    refs, syn = _refs(n_papers=2, n_reviews=2)
    refs = refs.with_columns(pl.col("judgments").str.split("\n").list.head(2).list.join("\n"))
    cands = human_candidates(refs)
    negatives = draw_negatives(cands, refs, 1, seed=0)
    names = ["tvd_mi", "kl_direct_report", "tv_fvar_statement", "gppm_judgment"]
    readout = score_metrics(names, cands, refs, syn, build_resources(ScoreConfig()), negatives=negatives)
    assert readout["reason"].is_null().all()
    for name, low, high in (("tvd_mi", -1, 1), ("tv_fvar_statement", -1, 1), ("kl_direct_report", -LOG8, LOG8),
                            ("gppm_judgment", -LOG8, LOG8)):
        values = readout.filter(pl.col("metric") == name)["score"]
        assert values.is_finite().all() and values.min() >= low and values.max() <= high, name
    resources = build_resources(ScoreConfig(oracle_predictor="generate"), llm_cache=tmp_path)
    generated = score_metrics(["tvd_mi", "gppm_judgment", "llm_judge"], cands, refs, syn, resources, negatives=negatives)
    answers = resources.log.answers()
    assert answers.height > 0 and (answers["model"] == "smollm2").all()
    for row in generated.iter_rows(named=True):           # a score in range, or NaN with the reason
        if row["reason"] is None:
            assert {"tvd_mi": -1 <= row["score"] <= 1, "gppm_judgment": -LOG8 <= row["score"] <= LOG8,
                    "llm_judge": 0 <= row["score"] <= 10}[row["metric"]]
        else:
            assert math.isnan(row["score"]) and row["reason"] in ("oracle_unanswered", "judge_unanswered")
    usage = resources.log.usage()
    assert (usage["cost_usd"] == 0).all() and usage["requests"].sum() == answers.height
    again = build_resources(ScoreConfig(oracle_predictor="generate"), llm_cache=tmp_path)
    assert score_metrics(["tvd_mi", "gppm_judgment", "llm_judge"], cands, refs, syn, again,
                         negatives=negatives).equals(generated)
    oracle = again.log.usage().filter(~pl.col("purpose").str.starts_with("judge:"))   # the judge is read, not cached
    assert oracle["cached"].sum() == oracle["requests"].sum()
    assert set(generated.filter(pl.col("metric") == "llm_judge")["eval_lm"]) == {"readout:local/smollm2"}
