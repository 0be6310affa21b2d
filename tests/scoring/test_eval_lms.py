"""Several evaluation LMs in one run: config, scoring without overwriting, boards per evaluation LM,
their agreement, validation per evaluation LM; end to end (slow) with two real evaluation LMs and
raw-level validation."""

from __future__ import annotations

import math

import polars as pl
import pytest

import tasks.scoring.shards as shards_module
from tasks.core.config import ScoreConfig, load_config
from tasks.core.frames import judgments_text
from tasks.core.layout import stage_dir, write_parquet
from tasks.lm.loading import eval_specs
from tasks.scoring.eval_lms import eval_lm_metrics, metrics_per_eval_lm
from tasks.stages.score.stage import (
    read_inputs,
    score_inputs_each_eval_lm,
    sharded_loglikelihoods,
    shards_details,
    write_scores,
)
from tasks.stages.validate.stage import build_leaderboard
from tests.scoring_data import write_pipeline

F32, BF16 = "smollm2|float32|none", "smollm2|bfloat16|none"
TWO_LMS = '["smollm2", { eval_lm = "smollm2", dtype = "bfloat16" }]'


class Toml:
    """A TOML value written as is into the test config (write_pipeline quotes plain strings)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


def test_eval_lms_config_single_key_is_a_one_element_list() -> None:
    assert [s.resolved().key for s in eval_specs(ScoreConfig())] == [F32]
    two = ScoreConfig(eval_lms=["smollm2", {"eval_lm": "smollm2", "dtype": "bfloat16"}])
    assert [s.resolved().key for s in eval_specs(two)] == [F32, BF16]
    with pytest.raises(ValueError, match="twice"):
        eval_specs(ScoreConfig(eval_lms=["smollm2", {"eval_lm": "smollm2", "dtype": "float32"}]))
    with pytest.raises(ValueError, match="extra"):
        ScoreConfig(eval_lms=[{"model": "smollm2"}])
    assert eval_lm_metrics(["gem", "bleu", "gem_raw", "rouge_l"]) == ("gem", "gem_raw")
    # a served model beside a local one: two evaluation LMs, two boards, their agreement over the models
    served = {"server": {"backend": "openai", "api": "completions", "model": "other-lm", "base_url": "http://h:1/v1"}}
    mixed = eval_specs(ScoreConfig(eval_lms=["smollm2", served]))
    assert [s.resolved().key for s in mixed] == [F32, "other-lm|completions|h"] and mixed[1].server is not None
    with pytest.raises(ValueError, match="completions"):
        ScoreConfig(eval_lms=[{"server": {"backend": "anthropic", "model": "x"}}])
    assert metrics_per_eval_lm(["gem", "bleu"], 3) == [("gem", "bleu"), ("gem",), ("gem",)]


def _fake_shard(requests_dir, results_dir, shard, spec, token_budget):
    """A model-free shard: logprob from the user turn's length, scaled per evaluation LM (its dtype)."""
    frame = pl.read_parquet(requests_dir / f"{shard}.parquet")
    scale = {"float32": 1.0, "bfloat16": 0.5}[spec.resolved().dtype]
    write_parquet(frame.select("key", logprob=pl.col("user").str.len_chars().cast(pl.Float64) * -scale / 100,
                               n_tokens=pl.lit(3, pl.Int64)), results_dir / f"{shard}.parquet")
    return {"shard": shard, "status": "scored", "requests": frame.height, "seconds": 0.0}


def write_generated(root, pipeline: str = "t", n_papers: int = 2) -> None:
    """Two generated candidates per paper (models gen-a, gen-b) with judgments, as the generate stage writes them."""
    rows, lines = [], []
    for p in range(n_papers):
        for model, stance in (("gen-a", "appreciates"), ("gen-b", "criticizes")):
            cid = f"{model}/paper{p}"
            text = f"The reviewer {stance} the clarity of the writing." + (" The reviewer questions the baselines."
                                                                          if model == "gen-a" else "")
            rows.append({"candidate_id": cid, "paper_id": f"paper{p}", "model": model, "review": text})
            lines += [{"review_id": cid, "position": i, "text": t.strip() + "."}
                      for i, t in enumerate(text.split(".")[:-1])]
    folder = root / "data" / pipeline / "generate"
    folder.mkdir(parents=True, exist_ok=True)
    pl.DataFrame(rows).write_parquet(folder / "candidates.parquet")
    pl.DataFrame(lines, schema_overrides={"position": pl.Int32}).write_parquet(folder / "candidate_judgments.parquet")
    assert judgments_text(pl.DataFrame(lines)).height == 2 * n_papers


def test_two_eval_lms_score_apart_resume_and_give_two_boards_that_are_compared(tmp_path, monkeypatch) -> None:
    config = write_pipeline(tmp_path, n_papers=2, n_reviews=3, metrics=["gem"], baselines=["bleu"], shard_size=5,
                            eval_lms=Toml(TWO_LMS))
    write_generated(tmp_path)
    cfg = load_config(config).for_pipeline("t")
    monkeypatch.setattr(shards_module, "score_shard", _fake_shard)
    shards = sharded_loglikelihoods(cfg, "t")
    assert [s.spec.resolved().key for s in shards] == [F32, BF16]
    summary = write_scores(cfg, "t", score_inputs_each_eval_lm(cfg, "t", read_inputs(cfg, "t"), shards)[0],
                           shards_details(shards))
    scores = pl.read_parquet(stage_dir(cfg, "t", "score") / "scores.parquet")
    pairs = 2 * (3 * 2 + 2 * 3)   # per paper: 3 humans x 2 other reviews + 2 generated x 3 reviews
    by_metric = dict(scores.group_by("metric", "eval_lm").len().sort("metric", "eval_lm")
                     .select(pl.format("{}@{}", "metric", "eval_lm"), "len").iter_rows())
    assert by_metric == {"bleu@sacrebleu": pairs, f"gem@{BF16}": pairs, f"gem@{F32}": pairs}
    assert summary.details["eval_lms"] == [F32, BF16] and set(summary.details["mean_score"]) == set(by_metric)
    # each evaluation LM has its own shards in the one folder: none overwrote another's
    names = [{r["shard"] for r in s.runs} for s in shards]
    assert names[0] and names[1] and not names[0] & names[1]
    assert len(list((stage_dir(cfg, "t", "score") / "results").glob("*.parquet"))) == summary.details["shards"]
    gem = scores.filter(metric="gem").pivot("eval_lm", index=["candidate", "reference"], values="score")
    assert (gem[F32] != gem[BF16]).all()

    # a rerun scores nothing: every result of both evaluation LMs is found and reused, no shard is cut
    monkeypatch.setattr(shards_module, "score_shard", lambda *a: pytest.fail("a finished shard was rescored"))
    again = sharded_loglikelihoods(cfg, "t", run=lambda req, res, names, spec, budget: [
        {"shard": n, "status": "skipped" if (res / f"{n}.parquet").is_file() else "scored"} for n in names])
    rerun = write_scores(cfg, "t", score_inputs_each_eval_lm(cfg, "t", read_inputs(cfg, "t"), again)[0],
                         shards_details(again))
    assert rerun.details["shards"] == rerun.details["shards_scored"] == 0
    assert rerun.details["requests_reused"] == summary.details["requests"] - summary.details["requests_reused"] > 0

    boards = build_leaderboard(cfg, "t")
    board, agree = boards.leaderboard, boards.agreement
    assert sorted(board.filter(metric="gem").group_by("eval_lm").len().rows()) == [(BF16, 3), (F32, 3)]
    assert board.filter(metric="bleu")["eval_lm"].unique().to_list() == ["sacrebleu"]
    # cross-LM consistency over the models only (the human row apart): two models cannot show an agreement
    assert agree.select("metric", "eval_lm_a", "eval_lm_b", "n_models").rows() == [("gem", BF16, F32, 2)]
    assert math.isnan(agree["rho"][0]) and agree["reason"][0] == "only 2 complete pair(s); need at least 3"


def test_evaluation_lms_side_by_side_give_the_rows_they_give_one_after_another(tmp_path, monkeypatch) -> None:
    """With two slots the second evaluation LM scores in a thread of its own while the first scores here."""
    import threading

    import tasks.scoring.eval_lms as eval_lms_module
    from tasks.metrics.llm_log import LLMLog
    from tasks.metrics.resources import run_resources
    from tasks.scoring.eval_lms import score_each_eval_lm

    monkeypatch.setattr(shards_module, "score_shard", _fake_shard)
    where: dict[tuple[str, ...], str] = {}
    real = eval_lms_module.score_with_tables

    def noting_its_thread(metrics, *args):
        where[tuple(metrics)] = threading.current_thread().name
        return real(metrics, *args)
    monkeypatch.setattr(eval_lms_module, "score_with_tables", noting_its_thread)

    def scored(root, side_by_side: bool) -> pl.DataFrame:
        root.mkdir()
        config = write_pipeline(root, n_papers=2, n_reviews=3, metrics=["gem"], baselines=["bleu"], shard_size=5,
                                eval_lms=Toml(TWO_LMS))
        write_generated(root)
        cfg = load_config(config).for_pipeline("t")
        inputs, shards = read_inputs(cfg, "t"), sharded_loglikelihoods(cfg, "t")
        by_key = {s.spec: s for s in shards}

        def resources(spec):
            return run_resources(cfg, "t", cfg.score.all_metrics, by_key[spec], spec, None, LLMLog(), None)
        return score_each_eval_lm(cfg.score.all_metrics, list(by_key), resources, inputs.candidates, inputs.references,
                                  inputs.synopses, inputs.negatives, side_by_side=side_by_side).scores

    apart = scored(tmp_path / "apart", side_by_side=False)
    assert set(where.values()) == {threading.current_thread().name}
    together = scored(tmp_path / "together", side_by_side=True)
    assert where[("gem", "bleu")] == threading.current_thread().name and where[("gem",)].startswith("eval-lm")
    order = ["metric", "eval_lm", "candidate", "reference"]
    assert together.sort(order).equals(apart.sort(order)) and together["eval_lm"].n_unique() == 3


def test_validation_runs_once_per_eval_lm_and_tags_its_rows(tmp_path, monkeypatch) -> None:
    from tasks.stages.validate.stage import validate_pipeline

    config = write_pipeline(tmp_path, n_papers=3, n_reviews=3, metrics=["gem"], eval_lms=Toml(TWO_LMS))
    with config.open("a") as f:
        f.write('\n[validate]\nmetrics = ["gem", "bleu"]\nstrategies = ["sentence_deletion", "adversary"]\n'
                'adversary_steps = 1\nmin_pairs = 2\n')
    cfg = load_config(config).for_pipeline("t")
    monkeypatch.setattr(shards_module, "score_shard", _fake_shard)
    result = validate_pipeline(cfg, "t")
    rows = result.validation.select("metric", "strategy", "eval_lm").rows()
    assert rows == [("gem", "sentence_deletion", F32), ("gem", "adversary", F32),
                    ("bleu", "sentence_deletion", F32), ("bleu", "adversary", F32),
                    ("gem", "sentence_deletion", BF16), ("gem", "adversary", BF16)]
    assert result.stats["eval_lms"] == [F32, BF16]
    assert set(result.stats["adversary_largest_inflation"]) == {"gem", "bleu", f"gem@{BF16}"}
    for frame in (result.pairs, result.adversary, result.length_confound):
        assert frame.filter(metric="gem").group_by("eval_lm").len().height == 2
        assert frame.filter(metric="bleu")["eval_lm"].unique().to_list() == ["sacrebleu"]
    assert result.perturbations.filter(strategy="sentence_deletion").height == 3   # perturbed once


def test_with_two_slots_the_second_validation_starts_once_the_perturbations_exist(tmp_path, monkeypatch) -> None:
    """Side by side (`[score] gpu_concurrency = 2`): the second evaluation LM's run, in its own thread, tests
    the perturbations the first made (made once) and the table is the one the runs give one after another."""
    import threading

    import tasks.stages.validate.workflow as workflow
    from tasks.stages.validate.stage import validate_pipeline

    monkeypatch.setattr(shards_module, "score_shard", _fake_shard)
    made: list[str] = []
    real_perturb, real_validation = workflow.perturb_reviews, workflow.run_validation
    ran: dict[str, str] = {}

    def perturbing(*args, **kwargs):
        made.append(threading.current_thread().name)
        return real_perturb(*args, **kwargs)

    def noting_its_thread(reviews, settings, resources, **kwargs):
        ran[resources.eval_lm] = threading.current_thread().name
        return real_validation(reviews, settings, resources, **kwargs)
    monkeypatch.setattr(workflow, "perturb_reviews", perturbing)
    monkeypatch.setattr("tasks.stages.validate.stage.run_validation", noting_its_thread)

    def validated(root, concurrency: int):
        root.mkdir()
        config = write_pipeline(root, n_papers=3, n_reviews=3, metrics=["gem"], eval_lms=Toml(TWO_LMS),
                                gpu_concurrency=concurrency)
        with config.open("a") as f:
            f.write('\n[validate]\nmetrics = ["gem", "bleu"]\nstrategies = ["sentence_deletion", "adversary"]\n'
                    'adversary_steps = 1\nmin_pairs = 2\n')
        return validate_pipeline(load_config(config).for_pipeline("t"), "t")

    apart = validated(tmp_path / "apart", 1)
    assert made == [threading.current_thread().name] and set(ran.values()) == set(made)
    made.clear()
    together = validated(tmp_path / "together", 2)
    assert made == [threading.current_thread().name]
    assert ran[F32] == threading.current_thread().name and ran[BF16].startswith("eval-lm")
    assert together.validation.equals(apart.validation) and together.pairs.equals(apart.pairs)
    assert together.stats["eval_lms"] == [F32, BF16]


@pytest.mark.slow
def test_two_real_eval_lms_and_raw_level_validation_end_to_end(tmp_path, prefect_harness) -> None:
    """score -> validate -> materialize on a synthetic pipeline with two evaluation LMs (the embedded
    SmolLM2 in float32 and in bfloat16) and validation at both levels, the raw one preprocessed by the
    embedded SmolLM2."""
    import duckdb

    from flows.score import score_flow
    from flows.validate import validate_flow
    from tasks.stages.materialize.build import build_database

    config = write_pipeline(tmp_path, n_papers=2, n_reviews=3, metrics=["gem"], eval_lms=Toml(TWO_LMS))
    with config.open("a") as f:
        f.write('\n[preprocess]\nmax_tokens = 48\n\n[validate]\nmetrics = ["gem", "bleu"]\n'
                'strategies = ["sentence_deletion", "format_headers"]\nlevel = ["raw", "judgments"]\nmin_pairs = 2\n'
                'bootstrap_resamples = 200\n')
    write_generated(tmp_path)
    cfg = load_config(config).for_pipeline("t")
    scored = score_flow(cfg, "t")
    assert scored.details["eval_lms"] == [F32, BF16] and scored.details["gaps"] == {}
    summary = validate_flow(cfg, "t")
    validation = pl.read_parquet(stage_dir(cfg, "t", "validate") / "validation.parquet")
    gem = validation.filter(metric="gem").select("strategy", "level", "eval_lm").sort("eval_lm", "strategy", "level")
    assert gem.rows() == [(s, lvl, lm) for lm in (BF16, F32) for s in ("format_headers", "sentence_deletion")
                          for lvl in ("judgments", "raw")]
    assert set(validation.filter(metric="bleu")["level"]) == {"raw"}
    assert summary.details["rejects"] == 0 or summary.details["perturbations_failed"] == 0

    for partial in [*(tmp_path / "data" / "t").glob("*/curate/*.parquet"),
                    tmp_path / "data" / "t" / "generate" / "candidates.parquet"]:
        partial.unlink()   # the fixture's curate and generate files are not full CURATED_REVIEWS / GENERATED rows
    build_database(cfg, "t")
    with duckdb.connect(str(cfg.database), read_only=True) as con:
        boards = con.execute("SELECT eval_lm, count(*) FROM leaderboard WHERE metric = 'gem' GROUP BY ALL "
                             "ORDER BY eval_lm").fetchall()
        assert boards == [(BF16, 3), (F32, 3)]   # human, gen-a, gen-b under each evaluation LM
        agree = con.execute("SELECT metric, eval_lm_a, eval_lm_b, n_models, rho FROM leaderboard_agreement").fetchall()
        assert [a[:4] for a in agree] == [("gem", BF16, F32, 2)]   # gen-a and gen-b: the human row apart
        lms = con.execute("SELECT DISTINCT eval_lm FROM validation WHERE metric = 'gem' ORDER BY 1").fetchall()
        assert lms == [(BF16,), (F32,)]
        assert con.execute("SELECT count(DISTINCT eval_lm) FROM length_confound WHERE metric = 'gem'").fetchone() == (2,)
