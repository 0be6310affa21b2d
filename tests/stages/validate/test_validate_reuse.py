"""Validation after a score run answers its unperturbed candidates from the score stage's results."""

from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tasks.core.config import load_config
from tasks.core.layout import stage_dir
from tasks.core.schema import SCORING_CANDIDATES
from tasks.metrics import get
from tasks.metrics.gem import build_requests
from tasks.metrics.resources import build_resources, eval_spec
from tasks.scoring.shards import ShardedLoglikelihood
from tasks.stages.score.stage import (
    read_inputs,
    score_inputs,
    shard_details,
    sharded_loglikelihood,
    write_scores,
)
from tasks.stages.validate.reuse import ReusingLoglikelihood, finished_results
from tasks.stages.validate.stage import (
    read_reviews,
    validate_pipeline,
    validate_reviews,
    validation_loglikelihood,
)
from tests.scoring_data import write_pipeline

METRICS = ["gem_s_abstract"]


def _config(tmp_path):
    config = write_pipeline(tmp_path, n_papers=2, n_reviews=3, metrics=METRICS)
    with config.open("a") as f:
        f.write('\n[validate]\nmetrics = ["gem_s_abstract", "bleu"]\ncandidates = "one"\nmin_pairs = 2\nlevel = ["judgments"]\n'
                'bootstrap_resamples = 50\n')
    return load_config(config).for_pipeline("t")


class Recording:
    """A loglikelihood resource that remembers every key it was asked."""

    def __init__(self, inner):
        self.inner, self.keys = inner, []

    def __call__(self, requests):
        self.keys += requests["key"].to_list()
        return self.inner(requests)


def _original_keys(cfg, result) -> set[str]:
    """Request keys of the unperturbed candidates validation scored (conditionals and marginals)."""
    reviews = read_reviews(cfg, "t")
    originals = set(result.scores.filter(pl.col("source") == "human")["candidate"])
    cands = reviews.filter(pl.col("review_id").is_in(list(originals))).select(
        "paper_id", pl.col("review_id").alias("candidate"), pl.lit("human").alias("source"), "review_id",
        "review_text", "judgments").cast(dict(SCORING_CANDIDATES))
    refs = reviews.select("paper_id", "review_id", "review_text", "judgments")
    synopses = reviews.group_by("paper_id").agg(pl.col("abstract", "assw").first())
    _, requests = build_requests(cands, refs, synopses, get(METRICS), eval_spec(cfg.score).resolved().key)
    return set(requests["key"])


@pytest.mark.slow
def test_validate_after_score_asks_nothing_for_the_originals_and_gives_the_same_rows(tmp_path, embedded_lm):
    cfg = _config(tmp_path)
    shards = sharded_loglikelihood(cfg, "t")
    write_scores(cfg, "t", score_inputs(cfg, read_inputs(cfg, "t"), build_resources(cfg.score, shards)),
                 shard_details(shards))
    scored = set(finished_results(stage_dir(cfg, "t", "score"))["key"])

    reusing = validation_loglikelihood(cfg, "t")
    reusing.inner = recorder = Recording(reusing.inner)
    reused = validate_reviews(cfg, read_reviews(cfg, "t"), build_resources(cfg.score, reusing))
    originals = _original_keys(cfg, reused)
    assert originals and originals <= scored                    # the score stage asked them all
    assert recorder.keys and not originals & set(recorder.keys)   # validation asked none of them again
    assert reusing.reused >= len(originals) and reusing.asked == len(set(recorder.keys))

    fresh_shards = ShardedLoglikelihood(tmp_path / "fresh", eval_spec(cfg.score), cfg.score.token_budget,
                                        cfg.score.shard_size)
    fresh = validate_reviews(cfg, read_reviews(cfg, "t"), build_resources(cfg.score, Recording(fresh_shards)))
    assert originals <= set(pl.read_parquet(tmp_path / "fresh" / "requests" / "*.parquet")["key"])

    key = ["metric", "candidate"]
    assert_frame_equal(reused.scores.sort(key), fresh.scores.sort(key), abs_tol=1e-4, check_exact=False)
    assert_frame_equal(reused.validation, fresh.validation, abs_tol=1e-3, check_exact=False)
    assert reused.validation.drop_nans(["p_value"]).select("metric", "strategy", "passed").equals(
        fresh.validation.drop_nans(["p_value"]).select("metric", "strategy", "passed"))

    stage = validate_pipeline(cfg, "t")                          # the stage itself counts in its stats
    assert stage.stats["loglikelihood_reused"] >= len(originals)
    assert stage.validation.equals(reused.validation)


def test_reuse_answers_known_keys_and_asks_the_rest(tmp_path):
    from tasks.core.layout import write_parquet

    write_parquet(pl.DataFrame({"key": ["a", "b"], "logprob": [-1.0, -2.0], "n_tokens": [1, 2]}),
                  tmp_path / "results" / "shard-1.parquet")
    asked = []

    def inner(requests):
        asked.extend(requests["key"])
        return requests.unique("key").select("key", logprob=pl.lit(-9.0), n_tokens=pl.lit(9, pl.Int64))

    reuse = ReusingLoglikelihood(inner, tmp_path)
    requests = pl.DataFrame({"key": ["b", "c", "c"], "system": "s", "user": "u", "continuation": "y"})
    out = reuse(requests).sort("key")
    assert out.rows() == [("b", -2.0, 2, False), ("c", -9.0, 9, False)] and asked == ["c", "c"]   # truncated: no
    assert (reuse.reused, reuse.asked) == (1, 1)
    assert ReusingLoglikelihood(inner, tmp_path / "none")(requests).height == 2    # no score run: all asked
