"""A pipeline whose evaluation LM is served: `[score.eval_server]` names an OpenAI-compatible completions
server ("served:smollm2": the local server on the embedded model), and the score and validate flows
take GEM's log-likelihoods and the oracle's readout from it, in the scores the local engine would give."""

from __future__ import annotations

import polars as pl
import pytest

from tasks.core.config import load_config
from tasks.core.layout import stage_dir
from tasks.lm import LoglikelihoodRequest, ModelSpec, local_lm
from tests.scoring_data import write_pipeline

SERVED = "smollm2|completions|served:smollm2"
EVAL_SERVER = ('\n[score.eval_server]\nbackend = "openai"\napi = "completions"\nmodel = "smollm2"\n'
               'base_url = "served:smollm2"\napi_key_env = ""\nbatch_size = 8\n')
VALIDATE = ('\n[validate]\nmetrics = ["gem", "tv_fvar_statement"]\nstrategies = ["sentence_deletion"]\n'
            'min_pairs = 2\nbootstrap_resamples = 0\nlevel = ["judgments"]\n')


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_score_and_validate_with_the_evaluation_lm_on_a_completions_server(tmp_path, prefect_harness,
                                                                          embedded_lm) -> None:
    from flows.score import score_flow
    from flows.validate import validate_flow
    from tasks.testing.openai_server import _SERVED

    config = write_pipeline(tmp_path, n_papers=2, n_reviews=2, metrics=["gem", "tv_fvar_statement"], negatives=1)
    with config.open("a") as f:
        f.write(VALIDATE + EVAL_SERVER)
    cfg = load_config(config).for_pipeline("t")
    scored = score_flow(cfg, "t")
    server = _SERVED["smollm2"]
    asked = server.counts["completions"]
    assert asked > 0 and scored.details["eval_lm"] == SERVED
    scores = pl.read_parquet(stage_dir(cfg, "t", "score") / "scores.parquet")
    assert dict(scores.select("metric", "eval_lm").unique().iter_rows()) == {
        "gem": SERVED, "tv_fvar_statement": f"readout:{SERVED}"}
    assert scores["score"].is_nan().sum() == 0 and scores.height == 2 * 2 * 1 * 2

    # the stored log-likelihoods equal the local engine's on the same requests
    folder = stage_dir(cfg, "t", "score")
    requests = pl.concat(pl.read_parquet(p) for p in (folder / "requests").glob("*.parquet")).sort("key").head(4)
    results = pl.concat(pl.read_parquet(p) for p in (folder / "results").glob("*.parquet"))
    served_lp = dict(results.select("key", "logprob").iter_rows())
    local = local_lm(ModelSpec()).loglikelihood(
        [LoglikelihoodRequest(*r) for r in requests.select("system", "user", "continuation").iter_rows()])
    for key, want in zip(requests["key"], local, strict=True):
        assert served_lp[key] == pytest.approx(want.logprob, abs=1e-4)

    summary = validate_flow(cfg, "t")
    assert server.counts["completions"] > asked and summary.details["shards_scored"] > 0
    validation = pl.read_parquet(stage_dir(cfg, "t", "validate") / "validation.parquet")
    assert set(validation["metric"]) == {"gem", "tv_fvar_statement"} and set(validation["eval_lm"]) >= {SERVED}


SERVED_BESIDE_LOCAL = ('["smollm2", { server = { backend = "openai", api = "completions", model = "smollm2", '
                       'base_url = "served:smollm2", api_key_env = "" } }]')


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_served_evaluation_lm_beside_a_local_one_gives_two_boards_and_their_agreement(tmp_path, prefect_harness,
                                                                                       embedded_lm) -> None:
    """Cross-LM consistency (GEM section 4.4) with one of the two evaluation LMs on a completions server:
    two GEM boards, and Spearman over the generated models only (the human row apart)."""
    from flows.score import score_flow
    from tasks.stages.validate.stage import build_leaderboard
    from tests.scoring.test_eval_lms import Toml, write_generated

    config = write_pipeline(tmp_path, n_papers=2, n_reviews=3, metrics=["gem"], eval_lms=Toml(SERVED_BESIDE_LOCAL))
    write_generated(tmp_path)
    _third_model(tmp_path)
    cfg = load_config(config).for_pipeline("t")
    scored = score_flow(cfg, "t")
    local = "smollm2|float32|none"
    assert scored.details["eval_lms"] == [local, SERVED]
    scores = pl.read_parquet(stage_dir(cfg, "t", "score") / "scores.parquet").filter(metric="gem")
    assert set(scores["eval_lm"]) == {local, SERVED} and scores["score"].is_nan().sum() == 0
    boards = build_leaderboard(cfg, "t")
    assert sorted(boards.leaderboard.filter(metric="gem").group_by("eval_lm").len().rows()) == sorted([(local, 4), (SERVED, 4)])
    [row] = boards.agreement.filter(metric="gem").to_dicts()
    assert {row["eval_lm_a"], row["eval_lm_b"]} == {local, SERVED} and row["n_models"] == 3 and row["reason"] is None
    assert row["rho"] == pytest.approx(1.0)   # the same weights served and local: the same ranking of the models


def _third_model(root) -> None:
    """A third generated model (gen-c) beside write_generated's two, so that the boards' agreement has a rank."""
    folder = root / "data" / "t" / "generate"
    cands = pl.read_parquet(folder / "candidates.parquet")
    lines = pl.read_parquet(folder / "candidate_judgments.parquet")
    extra = [{"candidate_id": f"gen-c/paper{p}", "paper_id": f"paper{p}", "model": "gen-c",
              "review": "The reviewer doubts the novelty of the method."} for p in range(2)]
    pl.concat([cands, pl.DataFrame(extra)]).write_parquet(folder / "candidates.parquet")
    pl.concat([lines, pl.DataFrame([{"review_id": e["candidate_id"], "position": 0, "text": e["review"]} for e in extra],
                                   schema=lines.schema)]).write_parquet(folder / "candidate_judgments.parquet")
