"""The pairwise judge (tasks/metrics/pairwise.py) through the real `anthropic` and `openai` clients and the local
servers: each pair of generated candidates of a paper is judged against a revision of one of them, in both
orders; a judge that follows content gives the same verdict both ways, one that always names the first review
flips; the side table and the SQL marts (board with Wilson intervals, positional bias) say so."""

from __future__ import annotations

import json
import math
from pathlib import Path

import duckdb
import polars as pl
import pytest

from tasks.core.config import LLMConfig
from tasks.core.schema import REFERENCES, SCORING_CANDIDATES, SYNOPSES_WIDE
from tasks.lm.lazy import LazyLM
from tasks.metrics.pairwise import pairwise_family, parse_choice, verdict
from tasks.metrics.registry import REGISTRY, Resources
from tasks.testing.anthropic_server import AnthropicServer
from tasks.testing.openai_server import OpenAIServer

SQL = Path(__file__).resolve().parents[2] / "sql"
GOOD = "The router is never ablated; the paper should compare against fixed block selection."
PLAIN = ["The paper is well written and the topic matters.", "The experiments look fine to me overall."]
REVISION = "Revised: the router needs an ablation against fixed blocks."


def responder(params: dict) -> str:
    """The reviser answers with a fixed revision; the judge prefers the review naming the router when exactly
    one does, and otherwise always the review shown first (pure position bias)."""
    text = json.dumps(params)
    if "Primary review (rewrite this one)" in text:
        return REVISION
    a = text.split("<review_a>")[-1].split("</review_a>")[0]
    b = text.split("<review_b>")[-1].split("</review_b>")[0]
    if ("router" in a) != ("router" in b):
        return " A" if "router" in a else " B"
    return " A"


def candidates() -> pl.DataFrame:
    rows = [{"paper_id": "p", "candidate": f"m{k}/p", "source": f"m{k}", "review_id": None, "review_text": text,
             "judgments": None} for k, text in enumerate([GOOD, *PLAIN], start=1)]
    rows += [{"paper_id": "p", "candidate": "h1", "source": "human", "review_id": "h1", "review_text": GOOD,
              "judgments": None},
             {"paper_id": "q", "candidate": "m1/q", "source": "m1", "review_id": None, "review_text": GOOD,
              "judgments": None}]
    return pl.DataFrame(rows, schema=SCORING_CANDIDATES)


def judge_lm(backend: str, url: str, tmp_path: Path) -> LazyLM:
    if backend == "anthropic":
        return LazyLM(LLMConfig(backend="anthropic", model="pair-judge", use_batches=False, max_retries=0), tmp_path)
    return LazyLM(LLMConfig(backend="openai", model="pair-judge", base_url=url, api_key_env="", use_batches=False,
                            max_retries=0), tmp_path)


@pytest.mark.parametrize("backend", ["anthropic", "openai"])
def test_both_orders_are_asked_and_a_position_biased_verdict_flips(tmp_path, monkeypatch, backend):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    server_type = AnthropicServer if backend == "anthropic" else OpenAIServer
    syn = pl.DataFrame([{"paper_id": "p", "abstract": "Sparse attention with a learned router."}], schema=SYNOPSES_WIDE)
    with server_type(responder) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        url = getattr(server, "base_url", server.url)
        result = pairwise_family([REGISTRY["pairwise_judge"]], candidates(), pl.DataFrame(schema=REFERENCES), None,
                                 syn, Resources(llm=judge_lm(backend, url, tmp_path)))
        asked = [json.dumps(r) for r in server.received]
    revisions = [a for a in asked if "Primary review (rewrite this one)" in a]
    judged = [a for a in asked if "<review_a>" in a]
    assert len(revisions) == 3 and len(judged) == 6                  # 3 pairs of m1..m3 on p; each order once
    assert all("possibly wrong" in r for r in revisions)             # the other review is guidance only
    assert all(REVISION in j for j in judged)                        # the judge reads the pair's revision
    scores = {r["candidate"]: r for r in result.scores.iter_rows(named=True)}
    assert "h1" not in scores                                        # human reviews are not compared
    assert scores["m1/p"]["score"] == 1.0                            # the content wins in both orders
    assert scores["m2/p"]["score"] == scores["m3/p"]["score"] == 0.25   # the biased pair: one order each
    assert math.isnan(scores["m1/q"]["score"]) and scores["m1/q"]["reason"] == "no_opponent"
    assert scores["m1/p"]["eval_lm"].startswith(f"{backend}/pair-judge")
    table = result.tables["pairwise"]
    assert table.height == 3 and result.counts["pairwise_pairs"] == 3
    flips = {(r["source_a"], r["source_b"]): r["flipped"] for r in table.iter_rows(named=True)}
    assert flips == {("m1", "m2"): False, ("m1", "m3"): False, ("m2", "m3"): True}
    board, bias = marts(table)
    row = board.filter(pl.col("model") == "m1").row(0, named=True)
    assert (row["games"], row["orders"], row["wins"], row["win_rate"]) == (2, 4, 2.0, 1.0)   # a pair is one game
    z = 1.959964
    assert row["ci_low"] == pytest.approx(2 / (2 + z * z))           # Wilson at p = 1 over 2 pairs: n / (n + z^2)
    assert row["ci_high"] == pytest.approx(1.0)
    m2 = board.filter(pl.col("model") == "m2").row(0, named=True)
    assert m2["win_rate"] == 0.25 and 0 < m2["ci_low"] < 0.25 < m2["ci_high"] < 1
    b = bias.row(0, named=True)
    assert (b["pairs"], b["answered_both"], b["flipped"]) == (3, 3, 1) and b["flip_rate"] == pytest.approx(1 / 3)
    assert b["first_position_share"] == pytest.approx(4 / 6) and b["reason"] is None


def marts(table: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The project's SQL marts on the side table, on in-memory DuckDB."""
    with duckdb.connect() as con:
        con.execute("CREATE SCHEMA staging")
        con.register("frame", table)
        con.execute("CREATE TABLE staging.pairwise AS SELECT * FROM frame")
        for name in ("pairwise", "pairwise_board", "pairwise_bias"):
            con.execute((SQL / "marts" / f"{name}.sql").read_text())
        return con.sql("SELECT * FROM pairwise_board").pl(), con.sql("SELECT * FROM pairwise_bias").pl()


def test_an_unanswered_judge_is_nan_with_its_reason_and_the_bias_says_why_it_is_null(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    syn = pl.DataFrame(schema=SYNOPSES_WIDE)
    with AnthropicServer(lambda p: REVISION if "Primary review" in json.dumps(p) else "I cannot decide.") as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        result = pairwise_family([REGISTRY["pairwise_judge"]], candidates(), pl.DataFrame(schema=REFERENCES), None,
                                 syn, Resources(llm=judge_lm("anthropic", server.url, tmp_path)))
    got = result.scores.filter(pl.col("paper_id") == "p")
    assert got["reason"].to_list() == ["judge_unanswered"] * 3 and got["score"].is_nan().all()
    _, bias = marts(result.tables["pairwise"])
    row = bias.row(0, named=True)
    assert row["flip_rate"] is None and row["reason"] == "no pair answered in both orders"


def test_the_verdict_is_read_in_the_pairs_own_terms():
    assert parse_choice("Better review: B") == -1.0 and parse_choice(" A") == 1.0
    assert math.isnan(parse_choice("Both are fine."))
    assert verdict(1.0, True) == "a" and verdict(1.0, False) == "b"     # the first shown is b in the swapped order
    assert verdict(-1.0, False) == "a" and verdict(0.0, True) == "tie" and verdict(math.nan, True) is None


def test_a_pair_cap_judges_a_different_pair_on_each_paper():
    from tasks.metrics.pairwise import chosen_pairs

    def pairs(paper: str) -> list:
        models = [{"paper_id": paper, "candidate": f"{m}/{paper}"} for m in ("m1", "m2", "m3")]
        return [(models[i], models[j]) for i, j in ((0, 1), (0, 2), (1, 2))]

    assert chosen_pairs(pairs("p0"), 0) == pairs("p0") and chosen_pairs(pairs("p0"), 5) == pairs("p0")
    picked = {tuple(c["candidate"].split("/")[0] for c in chosen_pairs(pairs(f"p{k}"), 1)[0]) for k in range(12)}
    assert len(picked) > 1                                               # not always the same two models
    assert all(len(chosen_pairs(pairs(f"p{k}"), 2)) == 2 for k in range(5))


def test_the_report_shows_the_pairwise_board_beside_the_pointwise_one(tmp_path):
    from tasks.report.validation import write_report

    board = pl.DataFrame({"judge": ["anthropic/j"], "model": ["m1"], "games": [4], "wins": [3.0], "win_rate": [0.75],
                          "ci_low": [0.3], "ci_high": [0.95]})
    bias = pl.DataFrame({"judge": ["anthropic/j"], "pairs": [3], "answered_both": [3], "flipped": [1],
                         "flip_rate": [1 / 3], "decided": [6], "first_position_share": [4 / 6], "reason": [None]})
    text = write_report({"pairwise_board": board, "pairwise_bias": bias}, tmp_path)["summary"].read_text()
    assert "## Pairwise judge" in text and "| anthropic/j | m1 | 4 | 3.000 | 0.750 | 0.300 | 0.950 |" in text
    assert "| anthropic/j | 3 | 3 | 1 | 0.333 | 6 | 0.667 |" in text


def test_a_pair_is_one_unit_of_the_boards_interval():
    """Five pairs judged in both orders: the board counts 5 games (not 10 orders), and its Wilson interval is
    the one of 5 units; a pair whose two orders disagree scores a half, one answered in one order only counts it."""
    from tasks.metrics.pairwise import PAIRWISE

    verdicts = [("a", "a"), ("a", "a"), ("a", "b"), ("b", "b"), ("a", None)]
    table = pl.DataFrame([{"paper_id": f"p{k}", "candidate_a": f"m1/p{k}", "candidate_b": f"m2/p{k}", "source_a": "m1",
                           "source_b": "m2", "revised_candidate": f"m1/p{k}", "verdict_a_first": first,
                           "verdict_b_first": second, "flipped": first != second, "judge": "j",
                           "prompt_version": "pairwise-judge-v1"} for k, (first, second) in enumerate(verdicts)],
                         schema=PAIRWISE)
    board, _ = marts(table)
    m1 = board.filter(pl.col("model") == "m1").row(0, named=True)
    assert (m1["games"], m1["orders"]) == (5, 9) and m1["wins"] == pytest.approx(3.5)
    z, n, p = 1.959964, 5, 3.5 / 5
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert m1["ci_low"] == pytest.approx((centre - half) / (1 + z * z / n))
    assert m1["ci_high"] == pytest.approx((centre + half) / (1 + z * z / n))
    assert m1["interval"] == "wilson over pairs"
