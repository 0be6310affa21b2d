"""The token-level f-MI cells (tasks/metrics/fmi.py) and the negative references they read."""

from __future__ import annotations

import math

import polars as pl
import pytest

import tasks.scoring.shards as shards_module
from tasks.core.config import ValidateConfig, load_config
from tasks.core.frames import human_candidates, judgments_text, synopses_wide
from tasks.core.layout import stage_dir, write_parquet
from tasks.core.schema import REFERENCES, SCORES
from tasks.metrics import REGISTRY, Resources, score_metrics
from tasks.metrics.fmi import kl_direct, kl_fvar, tv_direct, tv_direct_marginal, tv_fvar
from tasks.metrics.negatives import draw_negatives
from tasks.metrics.prompts import NOT_AVAILABLE
from tasks.metrics.resources import build_resources, memoized
from tasks.stages.score.stage import (
    read_inputs,
    score_inputs,
    shard_details,
    sharded_loglikelihood,
    write_scores,
)
from tests.scoring_data import make_frames, write_pipeline

CELLS = ["kl_fvar_token", "tv_direct_token", "tv_direct_marginal_token", "tv_fvar_token"]


def _refs(n_papers: int, n_reviews: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    frames = make_frames(n_papers, n_reviews)
    refs = frames["reviews"].join(judgments_text(frames["judgments"]), on="review_id", how="left")
    return refs.select(REFERENCES.names()), synopses_wide(frames["synopses"])


# ---------------------------------------------------------------- estimators on hand-worked values

def test_a_ratio_of_one_everywhere_gives_zero() -> None:
    for estimator in (kl_direct, kl_fvar, tv_direct, tv_direct_marginal, tv_fvar):
        assert estimator(0.0, [0.0, 0.0, 0.0]) == 0.0


def test_hand_worked_values() -> None:
    # log r(x, y) = 2 (the candidate makes y e^2 times likelier), negatives log r = -1 and 0.5
    negs = [-1.0, 0.5]
    assert kl_direct(2.0, negs) == 2.0
    assert kl_fvar(2.0, negs) == pytest.approx(1 + 2 - (math.exp(-1) + math.exp(0.5)) / 2)   # = 1.9917...
    assert tv_direct(2.0, negs) == pytest.approx(1 - math.exp(-2))                          # (1 - 1/r)+ = 0.8647...
    assert tv_direct(-2.0, negs) == 0.0                                                     # r < 1: no agreement
    assert tv_direct_marginal(2.0, negs) == pytest.approx(((1 - math.exp(-1)) + 0.0) / 2)   # (1 - r(x, y-))+ averaged
    assert tv_fvar(2.0, negs) == pytest.approx(0.5 - (-0.5 + 0.5) / 2)                      # = 0.5


def test_negatives_equal_to_the_positive() -> None:
    for log_r in (-3.0, -0.2, 0.0, 0.7, 4.0):
        assert tv_fvar(log_r, [log_r] * 4) == 0.0
        assert kl_fvar(log_r, [log_r] * 4) == pytest.approx(1 + log_r - math.exp(log_r))
        assert kl_fvar(log_r, [log_r] * 4) <= 0.0      # 1 + t <= e^t: NWJ never rewards a non-contrastive pair


def test_tv_signs_and_bounds() -> None:
    assert tv_fvar(3.0, [-1.0, -2.0]) == 1.0 and tv_fvar(-3.0, [1.0, 2.0]) == -1.0   # the extremes
    assert tv_fvar(3.0, [1.0, -1.0]) == 0.5
    for log_r in (-5.0, -0.1, 0.1, 5.0):
        assert -1.0 <= tv_fvar(log_r, [0.3, -0.3, 2.0]) <= 1.0
        assert tv_direct(log_r, []) >= 0.0
    assert tv_direct(5.0, []) < 1.0 and tv_direct(50.0, []) == pytest.approx(1.0)     # bounded by 1
    assert tv_direct(0.1, []) < tv_direct(1.0, [])                                    # grows with r above 1
    for log_r in (-800.0, -5.0, 0.3, 800.0):                                          # bounded: never overflows
        assert 0.0 <= tv_direct(log_r, []) < 1.0 + 1e-12 and 0.0 <= tv_direct_marginal(0.0, [log_r]) <= 1.0


def test_direct_tv_ranks_agreement_above_contradiction() -> None:
    """The pointwise term 1/2 |1 - 1/r| scored log r = -3 (a review that makes the reference e^3 times
    less likely) 9.5 and log r = +3 only 0.48; the oriented cells rank the agreeing candidate first."""
    agrees, contradicts = 3.0, -3.0
    assert tv_direct(agrees, []) > tv_direct(contradicts, [])
    assert 0.5 * abs(1 - math.exp(-contradicts)) > 0.5 * abs(1 - math.exp(-agrees))   # the old term: the reverse
    # against other papers' reviews: fitting them (large r(x, y-)) lowers the marginal cell
    assert tv_direct_marginal(0.0, [-3.0]) > tv_direct_marginal(0.0, [3.0])
    # kl_fvar's mean of the r(x, y-) is computed in log space: one huge term does not overflow it
    assert kl_fvar(0.0, [700.0, 0.0]) == pytest.approx(1 - (math.exp(700.0) + 1) / 2)
    with pytest.raises(OverflowError):
        kl_fvar(0.0, [800.0, 0.0])
    with pytest.raises(ValueError, match="negative"):
        tv_fvar(1.0, [])


def test_registry_entries() -> None:
    for name in CELLS + [f"{c}_raw" for c in CELLS]:
        metric = REGISTRY[name]
        assert metric.needs.name == "lm_logprobs" and metric.higher_is_better and metric.conditioned_on == "none"
        assert metric.reads == ("raw" if name.endswith("_raw") else "judgments")
    assert not REGISTRY["tv_direct_token"].negatives and REGISTRY["tv_fvar_token"].negatives
    assert not REGISTRY["gem"].negatives


# ---------------------------------------------------------------- negative references

def test_negative_draws_are_deterministic_other_papers_and_per_group() -> None:
    refs, _ = _refs(n_papers=6, n_reviews=3)
    cands = human_candidates(refs)
    first = draw_negatives(cands, refs, 4, seed=3)
    assert first.equals(draw_negatives(cands.reverse(), refs.reverse(), 4, seed=3))
    assert not first.equals(draw_negatives(cands, refs, 4, seed=4))
    assert first.height == 6 * 3 * 2 * 4                                  # every pair gets 4
    assert first.filter(pl.col("negative_paper") == pl.col("paper_id")).is_empty()
    assert first.group_by("candidate", "reference").agg(pl.col("negative").n_unique())["negative"].min() == 4
    # the draw of a pair does not depend on which other candidates are scored
    one = draw_negatives(cands.head(1), refs, 4, seed=3)
    assert one.equals(first.filter(pl.col("candidate") == cands["candidate"][0]))
    # a perturbed copy (same review_id) gets its original's negatives
    copy = cands.head(1).with_columns(candidate=pl.lit("copy"), source=pl.lit("sentence_deletion"))
    assert draw_negatives(copy, refs, 4, seed=3).drop("candidate").equals(one.drop("candidate"))
    # groups: negatives come only from the candidate's group; too small a group gives what it has
    groups = {f"paper{p}": "A" if p < 2 else "B" for p in range(6)}
    grouped = draw_negatives(cands, refs, 4, seed=3, groups=groups)
    papers = grouped.with_columns(g=pl.col("paper_id").replace_strict(groups), h=pl.col("negative_paper").replace_strict(groups))
    assert (papers["g"] == papers["h"]).all()
    assert set(grouped.filter(pl.col("paper_id") == "paper0").group_by("candidate", "reference").len()["len"]) == {3}


# ---------------------------------------------------------------- end to end through the registry

def _fake_lm(refs: pl.DataFrame, asked: list[int]):
    """log p(y | s) = -20; log p(y | x, s) = -18 when x is a review of y's paper (log r = 2), else -21 (log r = -1)."""
    paper_of = {text: p for p, text in refs.select("paper_id", "judgments").iter_rows()}
    assert len(paper_of) == refs.height                       # every reference text names one paper

    def loglikelihood(requests: pl.DataFrame) -> pl.DataFrame:
        asked.append(requests.height)
        out = []
        for key, user, y in requests.select("key", "user", "continuation").iter_rows():
            if user.rstrip().endswith(NOT_AVAILABLE):
                out.append((key, -20.0, 5))
                continue
            shown = {p for text, p in paper_of.items() if text in user}
            out.append((key, -18.0 if paper_of[y] in shown else -21.0, 5))
        return pl.DataFrame(out, schema={"key": pl.String, "logprob": pl.Float64, "n_tokens": pl.Int64}, orient="row")
    return loglikelihood


def test_one_pass_scores_every_cell_and_leaves_gem_unchanged() -> None:
    refs, syn = _refs(n_papers=3, n_reviews=3)
    cands = human_candidates(refs)
    negatives = draw_negatives(cands, refs, 4, seed=0)
    asked: list[int] = []
    resources = Resources("lm", _fake_lm(refs, asked))
    scores = score_metrics(CELLS, cands, refs, syn, resources, negatives=negatives)
    assert len(asked) == 1                                   # one batch for the whole family
    pairs = 3 * 3 * 2
    # positives: a conditional per pair, a marginal per reference; negatives: a conditional per (candidate, negative)
    distinct_negs = negatives.select("candidate", "negative").unique().height
    assert asked[0] == pairs + 9 + distinct_negs
    expected = {"kl_fvar_token": 1 + 2 - math.exp(-1), "tv_direct_token": 1 - math.exp(-2),
                "tv_direct_marginal_token": 1 - math.exp(-1), "tv_fvar_token": 1.0}
    for metric, value in expected.items():
        got = scores.filter(pl.col("metric") == metric)
        assert got.height == pairs and got["score"].to_list() == pytest.approx([value] * pairs)
    assert scores.schema == SCORES and scores["reason"].null_count() == scores.height
    assert set(scores["logp_conditional"]) == {-18.0} and set(scores["logp_marginal"]) == {-20.0}

    # with GEM in the same run, the shared positives are asked once (memoized), and GEM is what it was alone
    alone = score_metrics(["gem"], cands, refs, syn, Resources("lm", _fake_lm(refs, [])))
    asked.clear()
    both = score_metrics(["gem", *CELLS], cands, refs, syn, Resources("lm", memoized(_fake_lm(refs, asked))),
                         negatives=negatives)
    assert both.filter(pl.col("metric") == "gem").equals(alone)
    assert asked == [pairs + 9, distinct_negs]


def test_gaps_and_loud_failures() -> None:
    refs, syn = _refs(n_papers=2, n_reviews=2)
    cands = human_candidates(refs)
    resources = Resources("lm", _fake_lm(refs, []))
    with pytest.raises(ValueError, match="need negative references"):
        score_metrics(["tv_fvar_token"], cands, refs, syn, resources)
    # no negative drawn for a pair -> NaN with a reason; a cell without negatives still scores
    none = draw_negatives(cands, refs, 1, seed=0).head(0)
    scores = score_metrics(["tv_fvar_token", "tv_direct_token"], cands, refs, syn, resources, negatives=none)
    assert set(scores.filter(pl.col("metric") == "tv_fvar_token")["reason"]) == {"no_negative"}
    assert scores.filter(pl.col("metric") == "tv_direct_token")["score"].is_nan().sum() == 0
    # a ratio too large for a float -> NaN with a reason, not an infinite score
    def huge(requests: pl.DataFrame) -> pl.DataFrame:
        marginal = requests["user"].str.strip_chars_end().str.ends_with(NOT_AVAILABLE)
        return requests.select("key", logprob=pl.when(marginal).then(-2000.0).otherwise(-10.0), n_tokens=pl.lit(4))
    blown = score_metrics(["kl_fvar_token"], cands, refs, syn, Resources("lm", huge),
                          negatives=draw_negatives(cands, refs, 1, seed=0))
    assert set(blown["reason"]) == {"ratio_overflow"} and blown["score"].is_nan().all()


def test_score_stage_draws_stores_and_scores_the_negatives(tmp_path, monkeypatch) -> None:
    config = write_pipeline(tmp_path, n_papers=3, n_reviews=2, metrics=["gem", "tv_fvar_token", "kl_fvar_token"],
                            negatives=2, negatives_seed=5, shard_size=8)
    cfg = load_config(config).for_pipeline("t")

    def fake_shard(requests_dir, results_dir, shard, spec, token_budget):
        frame = pl.read_parquet(requests_dir / f"{shard}.parquet")
        write_parquet(frame.select("key", logprob=pl.col("user").str.len_chars().cast(pl.Float64) / -100,
                                   n_tokens=pl.lit(3, pl.Int64)), results_dir / f"{shard}.parquet")
        return {"shard": shard, "status": "scored", "requests": frame.height, "seconds": 0.0}

    monkeypatch.setattr(shards_module, "score_shard", fake_shard)
    inputs = read_inputs(cfg, "t")
    assert inputs.negatives is not None and inputs.negatives.height == 3 * 2 * 1 * 2
    shards = sharded_loglikelihood(cfg, "t")
    scored = score_inputs(cfg, inputs, build_resources(cfg.score, shards))
    write_scores(cfg, "t", scored, shard_details(shards), inputs.negatives)
    scores = scored.scores
    folder = stage_dir(cfg, "t", "score")
    assert pl.read_parquet(folder / "negatives.parquet").equals(inputs.negatives)
    assert read_inputs(cfg, "t").negatives.equals(inputs.negatives)            # a rerun draws the same
    assert set(scores["metric"]) == {"gem", "tv_fvar_token", "kl_fvar_token"}
    assert scores["score"].is_nan().sum() == 0
    keys = [pl.read_parquet(p)["key"] for p in (folder / "requests").glob("*.parquet")]
    assert pl.concat(keys).is_unique().all()                                   # no request scored twice



def test_validation_scores_the_cells_with_the_originals_negatives() -> None:
    from tasks.stages.validate.workflow import run_validation
    from tests.stages.validate.test_validate_workflow import DETERMINISTIC, fake_loglikelihood, make_reviews

    out = run_validation(make_reviews(n_papers=4), ValidateConfig(strategies=DETERMINISTIC, metrics=["gem", "tv_fvar_token"], seed=1, min_pairs=2, level=("judgments",)), resources=Resources("fake-lm", fake_loglikelihood), negatives=2)
    assert set(out.validation["metric"]) == {"gem", "tv_fvar_token"}
    fmi = out.scores.filter(pl.col("metric") == "tv_fvar_token")
    assert fmi["score"].is_nan().sum() == 0 and fmi["score"].is_between(-1, 1).all()
