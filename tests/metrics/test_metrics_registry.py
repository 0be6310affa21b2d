"""The metric registry: one shape for every metric, one door to score them, read by config and leaderboard."""

from __future__ import annotations

import math
import typing
from pathlib import Path

import polars as pl
import pytest

from tasks.core.config import ConfigError, ScoreConfig, load_config
from tasks.core.schema import REFERENCES, SCORES, SCORING_CANDIDATES
from tasks.metrics import (
    REGISTRY,
    FamilyResult,
    Metric,
    MissingResource,
    Resources,
    check_names,
    register,
    score_metrics,
)
from tasks.metrics.registry import LLM_JUDGE, NEEDS, NOTHING, Conditioning
from tasks.stages.validate.leaderboard import leaderboard

REFS = pl.DataFrame({"paper_id": ["p", "p"], "review_id": ["a", "b"], "review_text": ["One text.", "Another text."],
                     "judgments": ["The reviewer appreciates x.", "The reviewer criticizes y."]}, schema=REFERENCES)
CANDS = REFS.select("paper_id", pl.col("review_id").alias("candidate"), pl.lit("human").alias("source"),
                    "review_id", "review_text", "judgments").cast(dict(SCORING_CANDIDATES))


def test_every_metric_declares_the_same_shape():
    assert {"gem_raw", "gem", "gem_s_abstract", "gem_s_assw", "bleu", "rouge_l", "bertscore_minilm", "lm_examiner", "bartscore_seq2seq_f1"} <= set(REGISTRY)
    for name, metric in REGISTRY.items():
        assert metric.name == name and metric.description
        assert metric.reads in ("raw", "judgments", "statements")
        assert metric.conditioned_on in typing.get_args(Conditioning)
        assert metric.needs is NEEDS[metric.needs.name]   # lm_logprobs, llm_oracle, ..., lm_readout
        assert isinstance(metric.higher_is_better, bool) and callable(metric.fn)
    with pytest.raises(ValueError, match="registered twice"):
        register(REGISTRY["gem"])


def test_unknown_or_no_metric_is_a_clear_error():
    assert check_names(["gem", "bleu"]) == ("gem", "bleu")
    for names in (["gem", "nope"], []):
        with pytest.raises(ValueError, match=r"unknown metric\(s\).*known: \["):
            check_names(names)


def test_a_missing_resource_fails_loudly_before_anything_is_scored():
    with pytest.raises(MissingResource, match="gem needs lm_logprobs"):
        score_metrics(["bleu", "gem"], CANDS, REFS, pl.DataFrame(), Resources())
    with pytest.raises(MissingResource, match="bertscore_minilm needs embedding"):
        score_metrics(["bertscore_minilm"], CANDS, REFS, pl.DataFrame(), Resources())


def test_families_are_called_once_with_all_their_metrics(monkeypatch):
    calls = []

    def family(metrics, candidates, references, negatives, synopses, resources):
        calls.append([m.name for m in metrics])
        return FamilyResult(pl.DataFrame([{"paper_id": "p", "candidate": "a", "source": "human", "reference": "b",
                                           "metric": m.name, "score": 1.0, "eval_lm": "judge"} for m in metrics]))

    for name in ("judge_a", "judge_b"):
        monkeypatch.setitem(REGISTRY, name, Metric(name, "raw", "none", LLM_JUDGE, True, "a test judge", family))
    scores = score_metrics(["judge_a", "bleu", "judge_b", "judge_a"], CANDS, REFS, pl.DataFrame(),
                           Resources(llm=object()))
    assert calls == [["judge_a", "judge_b"]]
    assert scores.schema == SCORES and scores["metric"].to_list()[:2] == ["judge_a", "judge_b"]
    assert set(scores["metric"]) == {"judge_a", "judge_b", "bleu"} and scores["logp_marginal"].is_null().all()


def _candidate_scores(metric: str) -> pl.DataFrame:
    means = {"model-a": 1.0, "model-b": 3.0, "human": 2.0}
    return pl.DataFrame([{"paper_id": f"p{p}", "candidate": f"{m}-{p}", "source": m, "metric": metric,
                          "eval_lm": "lm", "score": means[m] + 0.1 * p} for p in range(3) for m in means]
                        + [{"paper_id": "p0", "candidate": "model-c-0", "source": "model-c", "metric": metric,
                            "eval_lm": "lm", "score": math.nan}])


def test_leaderboard_ranks_by_the_metric_direction(monkeypatch):
    monkeypatch.setitem(REGISTRY, "error_rate", Metric("error_rate", "raw", "none", NOTHING, False,
                                                       "lower is better", REGISTRY["bleu"].fn))
    up = leaderboard(_candidate_scores("bleu"))
    down = leaderboard(_candidate_scores("error_rate"))
    ranked = {row["model"]: row["rank"] for row in up.iter_rows(named=True)}
    assert ranked == {"model-b": 1, "human": 2, "model-a": 3, "model-c": None}
    ranked = {row["model"]: row["rank"] for row in down.iter_rows(named=True)}
    assert ranked == {"model-a": 1, "human": 2, "model-b": 3, "model-c": None}
    assert down["model"].to_list() == ["model-a", "human", "model-b", "model-c"]
    assert down.filter(pl.col("model") == "model-a")["mean"][0] == pytest.approx(1.1)   # means are not flipped
    with pytest.raises(ValueError, match="unknown metric"):
        leaderboard(_candidate_scores("retired_metric"))


def test_config_checks_metric_names_against_the_registry(tmp_path, monkeypatch):
    from tasks.checks import check_config, load_checked_config

    assert ScoreConfig(metrics=("gem",), baselines=("bertscore_minilm", "gem")).all_metrics == ("gem", "bertscore_minilm")
    cfg = load_config(Path(__file__).resolve().parents[2] / "pipelines.toml")

    def with_(stage: str, **values):
        return cfg.model_copy(update={stage: getattr(cfg, stage).model_copy(update=values)})
    assert check_config(with_("validate", metrics=("bleu", "gem_s_assw")), pipelines=False)
    with pytest.raises(ConfigError, match=r"score.metrics: unknown metric.*gem_xl"):
        check_config(with_("score", metrics=("gem", "gem_xl")), pipelines=False)
    with pytest.raises(ConfigError, match=r"score.baselines: unknown metric.*meteor"):
        check_config(with_("score", baselines=("meteor",)), pipelines=False)
    with pytest.raises(ConfigError, match=r"validate.metrics: unknown metric"):
        check_config(with_("validate", metrics=()), pipelines=False)
    with pytest.raises(ConfigError, match=r"validate.strategies: unknown strategy \['shuffle'\]"):
        check_config(with_("validate", strategies=("shuffle",)), pipelines=False)
    monkeypatch.setitem(REGISTRY, "new_metric", Metric("new_metric", "raw", "none", NOTHING, True, "x",
                                                       REGISTRY["bleu"].fn))
    assert check_config(with_("validate", metrics=("new_metric",)), pipelines=False)   # registered is enough
    bad = tmp_path / "pipelines.toml"   # a pipeline's override is checked too, and named with the file
    bad.write_text(Path(__file__).resolve().parents[2].joinpath("pipelines.toml").read_text()
                   + '\n[pipelines.extra]\nvenues = ["X/2025/Conf"]\nstages = ["score"]\n'
                     '[pipelines.extra.score]\nmetrics = ["gem_xl"]\n')
    with pytest.raises(ConfigError, match=r"pipelines.toml: pipelines.extra.score.metrics: unknown metric"):
        load_checked_config(bad)
    config = tmp_path / "pipelines.toml"
    config.write_text('[validate]\nmetrics = ["gem", "bleuu"]\n')
    with pytest.raises(ConfigError, match="bleuu"):
        load_checked_config(config)
