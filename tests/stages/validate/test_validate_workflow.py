"""The validation workflow end to end on small generated reviews.

The workflow tests score through fake resources (a log-likelihood and an embedder computed from the
texts), so they load no model; the flow test runs gem on SmolLM2 (slow)."""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl
import pytest

from tasks.core.config import PreprocessConfig, ValidateConfig
from tasks.lm.anthropic_api import AnthropicLM
from tasks.metrics import Resources
from tasks.metrics.classic import bleu
from tasks.stages.validate.leaderboard import agreement, leaderboard
from tasks.stages.validate.perturb import FILLER_JUDGMENTS
from tasks.stages.validate.stage import llm_preprocessor
from tasks.stages.validate.stats import mean_ci, paired_test, spearman
from tasks.stages.validate.workflow import prepare, run_validation
from tasks.testing.anthropic_server import AnthropicServer, system_text, user_text

TOPICS = ("the clarity of the writing", "the size of the experiments", "the novelty of the idea",
          "the choice of baselines", "the theoretical analysis", "the ablation studies", "the code release",
          "the computational cost", "the related work", "the evaluation metrics")
STANCES = ("appreciates", "criticizes", "questions", "suggests improving")
DETERMINISTIC = ["sentence_deletion", "random_replacement", "meaningless_elongation_proxy"]


def make_reviews(n_papers: int = 4, n_reviews: int = 3, seed: int = 3, lines: int = 4) -> pl.DataFrame:
    """Short reviews (two sections) with matching judgment lines and a quality score."""
    rng = random.Random(seed)
    rows = []
    for p in range(n_papers):
        for r in range(n_reviews):
            points = [(rng.choice(STANCES), rng.choice(TOPICS)) for _ in range(lines)]
            body = " ".join(f"I {s.split()[0].rstrip('s')} {t}." for s, t in points)
            rows.append({
                "paper_id": f"paper{p}", "review_id": f"paper{p}/r{r}",
                "review_text": f"Summary Of The Paper:\nThe paper proposes method {p}.\n\nStrengths And Weaknesses:\n{body}",
                "judgments": "\n".join(f"The reviewer {s} {t}." for s, t in points),
                "abstract": f"We propose method {p} for a small problem.",
                "quality": float(rng.randint(1, 3)),
            })
    return pl.DataFrame(rows)


def fake_loglikelihood(requests: pl.DataFrame) -> pl.DataFrame:
    """log p(y | prompt): minus y's length, plus a bonus for each word of y the prompt shows."""
    rows = []
    for key, user, y in requests.select("key", "user", "continuation").iter_rows():
        words = y.lower().split()
        shown = set(user.lower().split())
        rows.append((key, -0.5 * len(words) + 0.3 * sum(w in shown for w in words), len(words) + 1))
    return pl.DataFrame(rows, schema={"key": pl.String, "logprob": pl.Float64, "n_tokens": pl.Int64}, orient="row")


def fake_embed(texts: Sequence[str]) -> list[np.ndarray]:
    """One unit vector per word, drawn from a generator seeded by the word."""
    def vector(word: str) -> np.ndarray:
        v = np.random.default_rng(int(hashlib.sha256(word.encode()).hexdigest()[:8], 16)).normal(size=16)
        return v / np.linalg.norm(v)
    return [np.array([vector(w) for w in t.lower().split()]) for t in texts]


@pytest.fixture(scope="module")
def resources():
    return Resources("fake-lm", fake_loglikelihood, fake_embed, "fake-embedder")


@pytest.fixture(scope="module")
def result(resources):
    return run_validation(make_reviews(), ValidateConfig(strategies=DETERMINISTIC, metrics=["gem", "bleu", "rouge_l", "bertscore_minilm"], seed=1, min_pairs=2, level=("judgments",)), resources=resources)


@pytest.mark.slow
def test_table_has_every_metric_and_strategy(result):
    table = result.validation
    assert table.select("metric", "strategy").rows() == [
        (m, s) for m in ["gem", "bleu", "rouge_l", "bertscore_minilm"] for s in DETERMINISTIC]
    assert table["n"].to_list() == [4] * 12          # one candidate per paper, every perturbation scored
    assert table.filter(pl.col("strategy") == "meaningless_elongation_proxy")["kind"].unique().to_list() == ["manipulation"]
    # each row is the paired test of its own pairs
    for row in table.iter_rows(named=True):
        pairs = result.pairs.filter((pl.col("metric") == row["metric"]) & (pl.col("strategy") == row["strategy"]))
        test = paired_test(pairs["original"].to_numpy(), pairs["perturbed"].to_numpy(), row["kind"])
        assert row["p_value"] == pytest.approx(test.p_value, nan_ok=True)
        assert row["smd"] == pytest.approx(test.smd, nan_ok=True) and row["passed"] == test.passed
    assert result.stats["candidates"] == 4 and result.stats["perturbations_failed"] == 0


@pytest.mark.slow
def test_deterministic_strategies_act_on_judgment_lines(result):
    reviews = make_reviews()
    by_id = {r["review_id"]: r for r in reviews.iter_rows(named=True)}
    for row in result.perturbations.iter_rows(named=True):
        lines = by_id[row["review_id"]]["judgments"].split("\n")
        if row["strategy"] == "sentence_deletion":
            assert row["judgments"].split("\n") == lines[::2]
            assert "Summary Of The Paper:" in row["review_text"]
        elif row["strategy"] == "meaningless_elongation_proxy":
            assert row["judgments"].split("\n") == [*lines, *FILLER_JUDGMENTS]
        else:
            donor = [r for r in by_id.values() if r["judgments"] == row["judgments"]]
            assert donor and donor[0]["paper_id"] != row["paper_id"]
            assert donor[0]["review_text"] == row["review_text"]   # the same donor review on both levels


@pytest.mark.slow
def test_scores_pair_the_same_references(result):
    """At the judgments level alone, every metric of the table reads the same perturbed text: a metric
    that reads the raw review (bleu) reads the judgment lines in its place, and its rows say "judgments"."""
    reviews = make_reviews()
    assert set(result.validation["level"]) == {"judgments"} and set(result.pairs["level"]) == {"judgments"}
    pairs = result.pairs.filter((pl.col("metric") == "bleu") & (pl.col("strategy") == "sentence_deletion"))
    for row in pairs.iter_rows(named=True):
        refs = reviews.filter((pl.col("paper_id") == row["paper_id"]) & (pl.col("review_id") != row["candidate"]))
        text = reviews.filter(pl.col("review_id") == row["candidate"])["judgments"][0]
        perturbed = result.perturbations.filter(pl.col("candidate") == row["candidate"] + "~sentence_deletion")
        assert row["original"] == pytest.approx(float(np.mean(bleu([text] * refs.height, refs["judgments"]))))
        expected = float(np.mean(bleu([perturbed["judgments"][0]] * refs.height, refs["judgments"])))
        assert row["perturbed"] == pytest.approx(expected)
    gem = result.pairs.filter(pl.col("metric") == "gem")
    assert gem["original"].is_finite().all() and gem["perturbed"].is_finite().all()


@pytest.mark.slow
def test_human_correlation_scores_every_review(result):
    corr = result.human_correlation
    assert corr["metric"].to_list() == ["gem", "bleu", "rouge_l", "bertscore_minilm"]
    assert corr["n"].to_list() == [12] * 4             # with quality scores every review is scored
    reviews = make_reviews()
    scores = result.scores.filter(pl.col("metric") == "bleu").join(
        reviews.select(pl.col("review_id").alias("candidate"), "quality"), on="candidate")
    expected = spearman(scores["score"].to_numpy(), scores["quality"].to_numpy())
    assert corr.filter(pl.col("metric") == "bleu")["rho"][0] == pytest.approx(expected.rho)


def test_single_paper_records_failed_replacement():
    reviews = make_reviews(n_papers=1)
    out = run_validation(reviews, ValidateConfig(strategies=["random_replacement", "sentence_deletion"], metrics=["rouge_l"], candidates="all", min_pairs=2), resources=Resources())
    failed = out.perturbations.filter(pl.col("strategy") == "random_replacement")
    assert failed["review_text"].is_null().all() and failed["error"].str.contains("another paper").all()
    row = out.validation.filter(pl.col("strategy") == "random_replacement").row(0, named=True)
    assert row["n"] == 0 and row["n_dropped"] == 3 and row["passed"] is None and "pair" in row["reason"]
    assert out.validation.filter(pl.col("strategy") == "sentence_deletion")["n"][0] == 3
    rejected = out.rejects.filter(pl.col("rule") == "perturbation_failed")
    assert rejected.height == 3 and set(rejected["stage"]) == {"validate"}


def test_bad_rows_are_rejected_and_bad_input_raises():
    reviews = make_reviews(n_papers=2)
    broken = pl.concat([reviews, pl.DataFrame([
        {"paper_id": "paper0", "review_id": "paper0/r9", "review_text": "   "},
        {"paper_id": "paper1", "review_id": "paper1/r0", "review_text": "A duplicate id."},
    ])], how="diagonal_relaxed")
    kept, rejects = prepare(broken)
    assert kept.height == reviews.height
    assert sorted(rejects["rule"].to_list()) == ["duplicate_review_id", "empty_review"]
    with pytest.raises(ValueError, match="lack column"):
        prepare(reviews.drop("review_text"))
    with pytest.raises(ValueError, match="unknown metric"):
        run_validation(reviews, ValidateConfig(strategies=DETERMINISTIC, metrics=["nope"], min_pairs=2), resources=Resources())
    with pytest.raises(ValueError, match="unknown strategy"):
        run_validation(reviews, ValidateConfig(strategies=["shuffle"], metrics=["bleu"], min_pairs=2), resources=Resources())
    with pytest.raises(ValueError, match="need judgments"):
        run_validation(reviews.drop("judgments"), ValidateConfig(strategies=DETERMINISTIC, metrics=["gem"], min_pairs=2), resources=Resources())


def _responder(params: dict[str, Any]) -> str:
    """Preprocessing prompts get judgment lines; the rephrase of judgment lines gets reworded lines; the
    rephrase of a review gets a rewrite."""
    if "reviewer's judgments of a paper, one per line" in system_text(params):
        return "The reviewer warmly appreciates the clarity.\nThe reviewer firmly criticizes the datasets."
    if "list of the reviewer's judgments" in system_text(params):
        return "The reviewer appreciates the rewritten clarity.\nThe reviewer criticizes the small datasets."
    return "Summary Of The Paper:\nA rewritten summary.\n\nStrengths And Weaknesses:\n" + user_text(params)[-40:]


@pytest.mark.slow
def test_the_rephrase_rewrites_the_review_and_its_judgment_lines(resources, monkeypatch):
    """GEM appendix D.2.1: the rephrasers rewrite the judgments; the raw review is rewritten too, for the metrics
    that read raw text. Another LLM strategy's rewrite is preprocessed into judgments."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    cfg = PreprocessConfig(backend="anthropic", model="claude-test", use_batches=False, max_retries=0,
                           max_in_flight=1)
    with AnthropicServer(_responder) as server:
        backend = AnthropicLM(cfg, base_url=server.url, sleep=lambda _: None)
        out = run_validation(make_reviews(n_papers=3, lines=3), ValidateConfig(strategies=["rephrase", "flattery"], metrics=["gem"], min_pairs=2), resources=resources, backend=backend, preprocess=llm_preprocessor(backend, cfg))
    rewritten = out.perturbations
    assert rewritten.height == 6 and rewritten["error"].is_null().all()
    assert rewritten["review_text"].str.starts_with("Summary Of The Paper:\nA rewritten summary.").all()
    by = {s: f for (s,), f in rewritten.group_by("strategy")}
    assert by["rephrase"]["judgments"].to_list() == [
        "The reviewer warmly appreciates the clarity.\nThe reviewer firmly criticizes the datasets."] * 3
    assert by["rephrase"]["level"].to_list() == ["judgments"] * 3
    assert by["flattery"]["judgments"].to_list() == [      # the rewritten review, preprocessed
        "The reviewer appreciates the rewritten clarity.\nThe reviewer criticizes the small datasets."] * 3
    rows = {r["strategy"]: r for r in out.validation.iter_rows(named=True)}
    assert (rows["rephrase"]["kind"], rows["rephrase"]["n"], rows["rephrase"]["level"]) == ("manipulation", 3, "judgments")
    assert rows["flattery"]["level"] == "raw"


def test_leaderboard_means_intervals_exclusions_and_agreement():
    rows = []
    rng = np.random.default_rng(0)
    for lm, shift in (("lm-a", 0.0), ("lm-b", 0.1)):
        for p in range(6):
            for r in range(3):    # three held-out human reviews per paper
                rows.append({"paper_id": f"p{p}", "candidate": f"p{p}/r{r}", "source": "human", "metric": "gem",
                             "eval_lm": lm, "score": 1.0 + p * 0.1 + r * 0.05 + shift})
            for k, model in enumerate(("model-x", "model-y", "model-z")):
                score = math.nan if (model == "model-y" and p == 0) else 0.5 + k * 0.3 + shift + rng.normal(0, .01)
                rows.append({"paper_id": f"p{p}", "candidate": f"{model}/p{p}", "source": model, "metric": "gem",
                             "eval_lm": lm, "score": score})
    scores = pl.DataFrame(rows)
    exclusions = pl.DataFrame({"paper_id": ["p5"], "model": ["model-z"], "reason": ["published before cutoff"]})
    board = leaderboard(scores, exclusions)
    human = board.filter((pl.col("eval_lm") == "lm-a") & pl.col("is_human")).row(0, named=True)
    per_paper = [1.0 + p * 0.1 + 0.05 for p in range(6)]        # the mean of the three held-out reviews
    expected = mean_ci(per_paper, 0.90)
    assert human["mean"] == pytest.approx(expected.mean) and human["ci_low"] == pytest.approx(expected.ci_low)
    assert human["n_papers"] == 6 and human["confidence"] == 0.9
    y = board.filter((pl.col("eval_lm") == "lm-a") & (pl.col("model") == "model-y")).row(0, named=True)
    assert (y["n_papers"], y["n_missing"]) == (5, 1)
    z = board.filter((pl.col("eval_lm") == "lm-a") & (pl.col("model") == "model-z")).row(0, named=True)
    assert (z["n_papers"], z["n_excluded"], z["rank"]) == (5, 1, 2)
    assert board.filter(pl.col("eval_lm") == "lm-a").sort("rank")["model"].to_list()[0] == "human"
    agree = agreement(board)     # over the three models, the human row apart
    assert agree.row(0, named=True) | {"p_value": None} == {
        "metric": "gem", "eval_lm_a": "lm-a", "eval_lm_b": "lm-b", "n_models": 3, "rho": pytest.approx(1.0),
        "p_value": None, "reason": None}
    assert agreement(board, include_human=True)["n_models"].to_list() == [4]


@pytest.mark.slow
def test_validate_flow_writes_tables_that_materialize(tmp_path, prefect_harness, embedded_lm):
    from flows.validate import validate_flow
    from tasks.core.config import load_config
    from tasks.stages.materialize.build import build_database
    from tests.scoring_data import write_pipeline

    config = write_pipeline(tmp_path, n_papers=3, n_reviews=3)
    with config.open("a") as f:
        f.write('\n[validate]\nmetrics = ["gem_s_abstract", "bleu"]\ncandidates = "one"\nlevel = ["judgments"]\n')
    score_dir = tmp_path / "data" / "t" / "score"
    score_dir.mkdir(parents=True)
    rows = [{"paper_id": f"paper{p}", "candidate": f"{c}-{p}-{lm}", "source": c, "metric": "gem", "eval_lm": lm,
             "score": 0.1 * p + {"model-a": 0.5, "model-b": 0.35, "human": 0.2}[c] + (0.05 if lm == "lm2" else 0),
             "n_references": 2, "reason": None}
            for p in range(3) for c in ("human", "model-a", "model-b") for lm in ("lm1", "lm2")]
    pl.DataFrame(rows).write_parquet(score_dir / "candidate_scores.parquet")
    cfg = load_config(config).for_pipeline("t")
    summary = validate_flow(cfg, "t")
    assert (summary.rows_in, summary.rows_out) == (3 * 3, 6)      # 3 candidates x 3 strategies; 2 metrics x 3
    assert summary.details["candidates"] == 3 and summary.details["leaderboard_rows"] == 6
    out = tmp_path / "data" / "t" / "validate"
    validation = pl.read_parquet(out / "validation.parquet")
    assert validation.filter(pl.col("metric") != "bleu")["n"].to_list() == [3] * 3
    assert (out / "results").is_dir() and any((out / "results").iterdir())   # GEM scored as shards
    again = validate_flow(cfg, "t")                                           # a rerun reuses the shards
    assert pl.read_parquet(out / "validation.parquet").equals(validation) and again.rows_out == 6
    for curated in (tmp_path / "data" / "t").glob("*/curate/*.parquet"):
        curated.unlink()   # the score-test fixture's curate files are not full CURATED_REVIEWS rows
    built = build_database(cfg, "t")
    assert {"validation", "leaderboard", "human_correlation", "failing_metrics", "leaderboard_agreement"} <= set(
        built.tables)
    with duckdb_connect(cfg.database) as con:
        assert con.execute("SELECT count(*) FROM validation").fetchone()[0] == 6
        board = con.execute("SELECT eval_lm, model, rank FROM leaderboard ORDER BY eval_lm, rank").fetchall()
        assert board == [(lm, m, r) for lm in ("lm1", "lm2") for r, m in enumerate(("model-a", "model-b", "human"), 1)]
        failing = con.execute("SELECT metric, failed_tests FROM failing_metrics").fetchall()
        expected = validation.filter(pl.col("passed").not_()).group_by("metric").len()
        assert sorted(failing) == sorted(expected.rows())
        # the two evaluation LMs rank the two models alike; two models are too few for a Spearman rho (human apart)
        assert con.execute("SELECT n_models, reason FROM leaderboard_agreement").fetchone() == (
            2, "only 2 complete pair(s); need at least 3")


def duckdb_connect(path):
    import duckdb

    return duckdb.connect(str(path), read_only=True)
