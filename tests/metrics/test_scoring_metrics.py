"""The GEM family: request planning (leave-one-out, marginal dedupe, gaps), scores, and the ordering on SmolLM2."""

from __future__ import annotations

import math
import random

import polars as pl
import pytest
from scipy import stats

from tasks.core.frames import human_candidates, judgments_text, synopses_wide
from tasks.core.schema import REFERENCES, SCORING_CANDIDATES
from tasks.lm import LoglikelihoodRequest, ModelSpec, local_lm
from tasks.metrics import REGISTRY, Resources, candidate_scores, get, score_metrics
from tasks.metrics.gem import assemble_scores, build_requests, gem_family
from tasks.metrics.prompts import NOT_AVAILABLE
from tests.scoring_data import judgments, make_frames

GEM = ["gem_raw", "gem", "gem_s_abstract", "gem_s_assw"]


def _inputs(n_papers: int = 2, n_reviews: int = 3) -> tuple[pl.DataFrame, pl.DataFrame]:
    frames = make_frames(n_papers, n_reviews)
    refs = frames["reviews"].join(judgments_text(frames["judgments"]), on="review_id", how="left")
    return refs.select(REFERENCES.names()), synopses_wide(frames["synopses"])


def test_registry_declares_the_four_gem_metrics() -> None:
    assert [m.name for m in REGISTRY.values() if m.fn is gem_family] == GEM
    assert all(REGISTRY[m].higher_is_better and REGISTRY[m].needs.name == "lm_logprobs" for m in GEM)
    assert REGISTRY["gem_raw"].reads == "raw" and REGISTRY["gem"].conditioned_on == "none"
    assert REGISTRY["gem_s_assw"].conditioned_on == "abstract+assw"
    with pytest.raises(ValueError, match="unknown metric"):
        get(["gem", "nope"])


def test_score_is_the_log_likelihood_difference_through_the_resource() -> None:
    refs, syn = _inputs(n_papers=1, n_reviews=2)
    asked: list[int] = []

    def loglikelihood(requests: pl.DataFrame) -> pl.DataFrame:
        asked.append(requests.height)
        # conditional requests (the candidate is shown) get -10, marginals -12.5
        marginal = requests["user"].str.strip_chars_end().str.ends_with(NOT_AVAILABLE)
        return requests.select("key", logprob=pl.when(marginal).then(-12.5).otherwise(-10.0), n_tokens=pl.lit(4))

    scores = score_metrics(["gem", "gem_raw"], human_candidates(refs), refs, syn, Resources("lm", loglikelihood))
    assert asked == [2 * 2 * 2]                    # one batch for the whole family: 2 pairs x 2 metrics x 2 terms
    assert scores["score"].to_list() == pytest.approx([2.5] * 4)
    assert set(scores["eval_lm"]) == {"lm"} and set(scores["metric"]) == {"gem", "gem_raw"}


def test_pairs_are_leave_one_out_and_marginals_are_computed_once() -> None:
    refs, syn = _inputs(n_papers=2, n_reviews=3)
    metrics = get(GEM)
    pairs, requests = build_requests(human_candidates(refs), refs, syn, metrics, "lm")
    # 2 papers x 3 candidates x 2 other reviews x 4 metrics, each pair once
    assert pairs.height == 2 * 3 * 2 * 4
    assert pairs.filter(pl.col("candidate") == pl.col("reference")).is_empty()
    assert not pairs.select("candidate", "reference", "metric").is_duplicated().any()
    assert pairs["reason"].null_count() == pairs.height
    # one marginal per (reference, metric) however many candidates use it
    assert pairs["marg_key"].n_unique() == 2 * 3 * 4
    assert requests.height == pairs["cond_key"].n_unique() + pairs["marg_key"].n_unique()
    marginal = requests.filter(pl.col("key") == pairs["marg_key"][0]).row(0, named=True)
    assert marginal["user"].rstrip().endswith(NOT_AVAILABLE)
    gem_s = pairs.filter(pl.col("metric") == "gem_s_assw").row(0, named=True)
    cond = requests.filter(pl.col("key") == gem_s["cond_key"]).row(0, named=True)
    assert "Abstract:" in cond["user"] and "Claimed strengths" in cond["user"]


def test_gaps_get_a_reason_and_no_request() -> None:
    refs, syn = _inputs(n_papers=2, n_reviews=3)
    syn = syn.with_columns(pl.when(pl.col("paper_id") == "paper0").then(None).otherwise(pl.col("assw")).alias("assw"))
    refs = refs.with_columns(
        pl.when(pl.col("review_id") == "paper1-r0").then(None).otherwise(pl.col("judgments")).alias("judgments"))
    lonely = pl.DataFrame([{"paper_id": "paper9", "review_id": "paper9-r0", "review_text": "Fine.",
                            "judgments": "The reviewer appreciates the idea."}])
    refs = pl.concat([refs, lonely])
    pairs, _ = build_requests(human_candidates(refs), refs, syn, get(GEM), "lm")
    reasons = dict(pairs.group_by("reason").len().drop_nulls().iter_rows())
    assert reasons["no_assw"] == 3 * 2                         # paper0, gem_s_assw
    assert reasons["no_reference"] == 4                        # the single-review paper, per metric
    assert reasons["no_candidate_judgments"] == 3 * 2          # paper1-r0 as candidate, 3 judgment metrics
    assert reasons["no_reference_judgments"] == 3 * 2          # paper1-r0 as reference of its 2 peers
    assert pairs.filter(pl.col("reason").is_not_null())["cond_key"].null_count() == sum(reasons.values())
    with pytest.raises(ValueError, match="duplicated candidate"):
        build_requests(pl.concat([human_candidates(refs)] * 2), refs, syn, get(["gem"]), "lm")


def test_scores_and_candidate_means() -> None:
    refs, syn = _inputs(n_papers=1, n_reviews=3)
    pairs, requests = build_requests(human_candidates(refs), refs, syn, get(["gem"]), "lm")
    values = {k: -float(i + 1) for i, k in enumerate(requests["key"])}
    results = pl.DataFrame({"key": list(values), "logprob": list(values.values()), "n_tokens": [5] * len(values)})
    scores = assemble_scores(pairs, results, "lm")
    row = scores.row(0, named=True)
    pair = pairs.filter((pl.col("candidate") == row["candidate"]) & (pl.col("reference") == row["reference"]))
    expected = values[pair["cond_key"][0]] - values[pair["marg_key"][0]]
    assert row["score"] == pytest.approx(expected) and row["eval_lm"] == "lm"
    means = candidate_scores(scores)
    first = means.filter(pl.col("candidate") == row["candidate"]).row(0, named=True)
    assert first["n_references"] == 2
    assert first["score"] == pytest.approx(scores.filter(pl.col("candidate") == row["candidate"])["score"].mean())
    with pytest.raises(ValueError, match="no result"):
        assemble_scores(pairs, results.slice(1), "lm")


def test_candidate_mean_is_nan_with_reason_when_every_reference_is_a_gap() -> None:
    scores = pl.DataFrame({"paper_id": ["p"] * 2, "candidate": ["c"] * 2, "source": ["m"] * 2,
                           "reference": ["a", "b"], "metric": ["gem_s_assw"] * 2, "score": [math.nan] * 2,
                           "logp_conditional": [None, None], "logp_marginal": [None, None],
                           "n_tokens": [None, None], "eval_lm": ["lm"] * 2, "reason": ["no_assw"] * 2})
    row = candidate_scores(scores).row(0, named=True)
    assert math.isnan(row["score"]) and row["reason"] == "no_assw" and row["n_references"] == 0


@pytest.mark.slow
def test_candidates_carrying_more_of_the_reference_score_higher(embedded_lm) -> None:
    """Blackwell ordering: garbling a candidate (swapping one of the reference's judgments for an
    unrelated one) lowers GEM on average, over many generated items (paired one-sided tests)."""
    rng = random.Random(2025)
    refs, cands = [], []
    n_items = 10
    for i in range(n_items):
        reference = judgments(rng, 3)
        distractors = judgments(rng, 3, exclude=set(reference))
        shared = rng.sample(reference, 2)
        more = shared + distractors[:1]                       # carries 2 of the reference's judgments
        fewer = shared[:1] + distractors[:2]                  # the same with one of them swapped out
        rng.shuffle(more)
        rng.shuffle(fewer)
        paper = f"item{i}"
        refs.append({"paper_id": paper, "review_id": f"{paper}-ref", "review_text": None,
                     "judgments": "\n".join(reference)})
        for name, lines in (("more", more), ("fewer", fewer)):
            cands.append({"paper_id": paper, "candidate": f"{paper}-{name}", "source": name, "review_id": None,
                          "review_text": None, "judgments": "\n".join(lines)})
    references = pl.DataFrame(refs, schema=REFERENCES)
    candidates = pl.DataFrame(cands, schema=SCORING_CANDIDATES)
    pairs, requests = build_requests(candidates, references, pl.DataFrame(schema={"paper_id": pl.String}),
                                     get(["gem"]), "smollm2")
    assert requests.height == 3 * n_items
    assert requests["user"].n_unique() == 2 * n_items + 1     # one marginal prompt shared by every item
    results = local_lm(ModelSpec(), 2048).loglikelihood([LoglikelihoodRequest(r["system"], r["user"], r["continuation"])
                            for r in requests.iter_rows(named=True)])
    frame = requests.select("key").with_columns(
        logprob=pl.Series([r.logprob for r in results]), n_tokens=pl.Series([r.n_tokens for r in results]))
    scores = assemble_scores(pairs, frame, "smollm2")
    wide = scores.pivot("source", index="paper_id", values="score").sort("paper_id")
    diff = (wide["more"] - wide["fewer"]).to_list()
    assert stats.ttest_1samp(diff, 0.0, alternative="greater").pvalue < 0.01
    assert stats.binomtest(sum(d > 0 for d in diff), len(diff), alternative="greater").pvalue < 0.05
    assert wide["more"].mean() > 0                            # more of the reference: positive PMI on average
