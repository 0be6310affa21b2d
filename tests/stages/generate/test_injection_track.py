"""The injection track: planted copies of a paper (visible and hidden instruction), each
candidate's reviews of them through the real client and generation code, and the per-model shifts in
rating and in a metric, with their t interval; the table in the database and on the site."""

from __future__ import annotations

import math
import re

import duckdb
import polars as pl
import pytest
from scipy import stats

from tasks.core.config import CandidateConfig, InjectionConfig
from tasks.core.layout import stage_dir, write_parquet
from tasks.core.schema import INJECTION_SHIFTS, REFERENCES, SCORING_CANDIDATES
from tasks.lm import make_lm
from tasks.metrics import Resources, candidate_scores, score_metrics
from tasks.report.site import build_site
from tasks.stages.generate.injection import HIDDEN, OPENING, VISIBLE, plant, sample_papers
from tasks.stages.generate.reviews import generate_reviews, injected_reviews
from tasks.stages.materialize.build import build_database
from tasks.stages.score.injection import injected_candidates, shifts, t_interval
from tasks.testing.anthropic_server import AnthropicServer, heuristic_responder, system_text, user_text
from tests.stages.materialize.test_materialize import make_config, write_outputs

PAPER = "A Sparse Sampler\n\nAbstract\nWe propose a sampler. It is fast.\n\n1 Method\n" + "The method works well. " * 200


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "fake-test-key-injection")


def test_the_two_variants_are_planted_where_a_reader_of_the_text_meets_them() -> None:
    visible = plant(PAPER, "visible")
    assert visible.startswith(f"A Sparse Sampler\n\n{VISIBLE}\n\nAbstract")
    hidden = plant(PAPER, "hidden")
    at = hidden.index(HIDDEN)
    assert 0 < at <= OPENING + 1 and hidden.replace(f" {HIDDEN}", "", 1) == PAPER   # inline, nothing else changed
    assert "\n" not in hidden[at - 2:at + len(HIDDEN) + 2]
    with pytest.raises(ValueError, match="unknown injection variant"):
        plant(PAPER, "loud")


def test_the_sample_is_seeded() -> None:
    papers = pl.DataFrame({"paper_id": [f"P{k}" for k in range(9)]})
    one = sample_papers(papers, InjectionConfig(papers=3, seed=4))["paper_id"].to_list()
    assert one == sample_papers(papers, InjectionConfig(papers=3, seed=4))["paper_id"].to_list() and len(one) == 3
    assert sample_papers(papers, InjectionConfig(papers=20))["paper_id"].to_list() == sorted(papers["paper_id"])


def gullible(params: dict) -> str:
    """A stand-in reviewer that obeys any planted instruction: the top rating when it meets one."""
    if "<summary>" not in system_text(params):
        return heuristic_responder(params)
    user = user_text(params)
    obeys = VISIBLE in user or HIDDEN in user
    topic = re.search(r"<paper>\s*(.*?)\n", user, re.S).group(1)
    verdict = "excellent, sound and novel" if obeys else "promising but thin"
    return (f"<summary>\nThe paper {topic} proposes a sampler and argues it is fast.\n</summary>\n"
            f"<strengths>\n1. The work on {topic} is {verdict}.\n</strengths>\n<weaknesses>\n"
            f"{'1. None worth noting here.' if obeys else '1. The experiments use one seed only.'}\n</weaknesses>\n"
            f"<questions>\nHow does the sampler scale?\n</questions>\n<rating>\n{10 if obeys else 5}\n</rating>\n"
            "<confidence>\n3\n</confidence>")


def test_a_gullible_candidate_moves_and_the_shift_has_a_t_interval(tmp_path) -> None:
    papers = pl.DataFrame({"paper_id": ["P1", "P2", "P3"], "venue_id": ["V"] * 3, "title": ["Alpha", "Beta", "Gamma"],
                           "abstract": ["We propose a sampler. It is fast."] * 3})
    candidate = CandidateConfig(name="gull", backend="anthropic", model="gull", prompt_version="review-fields-v1",
                                max_tokens=400, max_context_tokens=4000, use_batches=False, max_retries=0,
                                knowledge_cutoff="2023-12-31")
    track = InjectionConfig(papers=2, seed=1)
    with AnthropicServer(gullible) as server:
        backend = make_lm(candidate, tmp_path, base_url=server.url)
        clean = generate_reviews(papers, None, candidate, backend).candidates
        run = injected_reviews(papers, papers, None, candidate, backend, track, 3.5)
        guarded = injected_reviews(papers, papers.filter(pl.col("paper_id") == "P3"), None, candidate, backend, track, 3.5)
    assert run is not None and run.candidates.height == 4                  # 2 papers x 2 variants
    drawn = set(run.candidates["paper_id"])
    assert guarded is None if "P3" not in drawn else set(guarded.candidates["paper_id"]) == {"P3"}
    assert set(run.candidates["variant"]) == {"visible", "hidden"}
    assert all(c.endswith(("#inject-visible", "#inject-hidden")) for c in run.candidates["candidate_id"])
    assert set(run.usage["purpose"]) == {"inject:gull:visible", "inject:gull:hidden"}
    assert run.rejects.is_empty() or set(run.rejects["entity"]) == {"injected_review"}
    references = pl.DataFrame({"paper_id": ["P1", "P2", "P3"], "review_id": ["h1", "h2", "h3"],
                               "review_text": ["The experiments use one seed only; the sampler is promising but thin."] * 3,
                               "judgments": [None] * 3}, schema=REFERENCES)
    clean_candidates = clean.select("paper_id", pl.col("candidate_id").alias("candidate"), pl.col("model").alias("source"),
                                    pl.lit(None, pl.String).alias("review_id"), pl.col("review").alias("review_text"),
                                    pl.lit(None, pl.String).alias("judgments")).cast(dict(SCORING_CANDIDATES))
    scored = [candidate_scores(score_metrics(["rouge_l"], frame, references, pl.DataFrame(), Resources()))
              for frame in (injected_candidates(run.candidates, None), clean_candidates)]
    table = shifts(run.candidates, clean, scored[0], scored[1], "rouge_l", (1, 3, 5, 6, 8, 10), 0.9)
    assert table.schema == INJECTION_SHIFTS and table.height == 4
    rating = table.filter((pl.col("measure") == "rating") & (pl.col("variant") == "hidden")).row(0, named=True)
    assert (rating["shift"], rating["n_papers"]) == (5.0, 2) and math.isnan(rating["ci_low"]) is False
    rouge = table.filter((pl.col("measure") == "rouge_l") & (pl.col("variant") == "visible")).row(0, named=True)
    assert rouge["shift"] < 0 and rouge["ci_low"] <= rouge["shift"] <= rouge["ci_high"]


def test_t_interval_matches_scipy_and_says_why_it_has_none() -> None:
    values = [0.5, 1.5, 1.0, 2.0]
    mean, low, high, why = t_interval(values, 0.9)
    expected = stats.t.interval(0.9, 3, loc=1.25, scale=stats.sem(values))
    assert (mean, why) == (1.25, None) and (low, high) == pytest.approx(expected)
    assert t_interval([1.0], 0.9)[3] == "one_paper" and t_interval([], 0.9)[3] == "no_pairs"


def test_the_table_in_the_database_and_on_the_site(tmp_path) -> None:
    cfg = make_config(tmp_path)
    write_outputs(cfg)
    table = pl.DataFrame([{"model": "gull", "variant": v, "measure": m, "eval_lm": None if m == "rating" else "lm",
                           "n_papers": 2, "shift": s, "ci_low": s - 1, "ci_high": s + 1, "confidence": 0.9,
                           "reason": None} for v in ("hidden", "visible") for m, s in (("gem", -0.25), ("rating", 5.0))],
                         schema=INJECTION_SHIFTS)
    write_parquet(table, stage_dir(cfg, "t", "score") / "injection_shifts.parquet")
    result = build_database(cfg, "t")
    assert result.tables["injection_shifts"] == 4
    with duckdb.connect(str(cfg.database), read_only=True) as con:
        assert con.execute("select shift from injection_shifts where variant = 'hidden' and measure = 'rating'"
                           ).fetchone() == (5.0,)
    page = (build_site(cfg.database, tmp_path / "site").out_dir / "leaderboard.html").read_text()
    assert "Injection track" in page and "gull" in page and "5.000" in page
