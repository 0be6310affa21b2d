"""Release ids (tasks/stages/validate/releases.py): identical inputs give one id, a changed evaluation LM
(or papers, judgments, metric settings) another; adding a model keeps it; the changelog says what moved."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from tasks.core.config import load_config
from tasks.core.layout import stage_dir
from tasks.core.schema import CURATED_PAPERS, CURATED_REVIEWS, JUDGMENTS, conform
from tasks.stages.validate.releases import (
    changelog,
    read_release_models,
    read_releases,
    record_release,
    release_of,
)

VENUE = "Test.cc/2025/Conference"
CONFIG = """
[paths]
data_dir = "data"
database = "data/test.duckdb"

[score]
eval_lm = "{eval_lm}"
dtype = "float32"
quantization = "none"
metrics = {metrics}
baselines = []
shard_size = {shard_size}

[pipelines.t]
venues = ["{venue}"]
stages = ["score", "validate", "materialize"]
"""


def configure(root: Path, eval_lm: str = "smollm2", metrics: str = '["gem"]', shard_size: int = 256):
    (root / "pipelines.toml").write_text(CONFIG.format(eval_lm=eval_lm, metrics=metrics, venue=VENUE,
                                                       shard_size=shard_size))
    return load_config(root / "pipelines.toml").for_pipeline("t")


def write_inputs(cfg, papers: int = 3, judgment: str = "The reviewer appreciates the clear method.") -> None:
    ids = [f"P{k}" for k in range(papers)]
    frame = pl.DataFrame({"paper_id": ids, "venue_id": [VENUE] * papers, "title": [f"Title {k}" for k in range(papers)],
                          "abstract": ["An abstract."] * papers, "in_benchmark": [True] * papers})
    conform(frame, CURATED_PAPERS).write_parquet(stage_dir(cfg, "t", "curate", VENUE) / "papers.parquet")
    reviews = pl.DataFrame({"review_id": [f"R{k}" for k in range(papers)], "paper_id": ids, "venue_id": [VENUE] * papers,
                            "review_text": ["A review."] * papers})
    conform(reviews, CURATED_REVIEWS).write_parquet(stage_dir(cfg, "t", "curate", VENUE) / "reviews.parquet")
    judgments = pl.DataFrame({"review_id": [f"R{k}" for k in range(papers)], "position": [0] * papers,
                              "stance": ["appreciates"] * papers, "text": [judgment] * papers,
                              "model": ["m"] * papers, "prompt_version": ["judgments-v1"] * papers})
    conform(judgments, JUDGMENTS).write_parquet(stage_dir(cfg, "t", "preprocess") / "judgments.parquet")


def test_identical_inputs_give_one_release_and_the_evaluation_lm_changes_it(tmp_path):
    cfg = configure(tmp_path)
    write_inputs(cfg)
    first, second = release_of(cfg, "t"), release_of(cfg, "t")
    assert first == second and len(first.release_id) == 12
    other_lm = release_of(configure(tmp_path, eval_lm="HuggingFaceTB/SmolLM2-360M-Instruct"), "t")
    assert other_lm.release_id != first.release_id
    assert other_lm.hashes["eval_lms"] != first.hashes["eval_lms"]
    assert {k: v for k, v in other_lm.hashes.items() if k != "eval_lms"} == \
        {k: v for k, v in first.hashes.items() if k != "eval_lms"}
    # a speed-only setting keeps the release; a metric, a judgment or a paper changes it
    assert release_of(configure(tmp_path, shard_size=16), "t").release_id == first.release_id
    assert release_of(configure(tmp_path, metrics='["gem", "gem_raw"]'), "t").release_id != first.release_id
    cfg = configure(tmp_path)
    write_inputs(cfg, judgment="The reviewer criticizes the missing baselines.")
    assert release_of(cfg, "t").hashes["references"] != first.hashes["references"]
    write_inputs(cfg, papers=4)
    assert release_of(cfg, "t").hashes["papers"] != first.hashes["papers"]


def test_a_rerun_keeps_the_release_row_and_the_changelog_lists_what_changed(tmp_path):
    cfg = configure(tmp_path)
    write_inputs(cfg)
    first = release_of(cfg, "t")
    t0, t1, t2 = (datetime(2026, 1, d, tzinfo=UTC) for d in (1, 2, 3))
    written = record_release(cfg, "t", first, ["human", "model-a"], now=t0)
    models = read_release_models(cfg, "t", first.release_id)
    record_release(cfg, "t", first, ["human", "model-a", "submitted-x"], now=t1)   # a submission: same release
    rows = read_releases(cfg, "t")
    assert rows.height == 1 and rows.equals(written) and rows["created_at"][0] == t0   # the row as first written
    now = read_release_models(cfg, "t", first.release_id)
    assert now.head(models.height).equals(models)              # the earlier models' rows as they were ...
    assert now.rows() == [*models.rows(), (first.release_id, "submitted-x", t1)]   # ... and one added
    write_inputs(cfg, papers=4)
    cfg = configure(tmp_path, metrics='["gem", "gem_raw"]')
    second = release_of(cfg, "t")
    record_release(cfg, "t", second, ["human", "submitted-x"], now=t2)
    changes = changelog(read_releases(cfg, "t"))
    latest = {r["what"]: r for r in changes.filter(pl.col("release_id") == second.release_id).iter_rows(named=True)}
    assert latest["papers"]["added"] == ["P3"] and latest["papers"]["removed"] == []
    assert "models" not in latest       # not part of a release: a new model changes no changelog row
    assert latest["metrics"]["added"] == ["gem_raw"] and latest["metrics"]["previous_id"] == first.release_id
    assert "venues" not in latest and "eval_lms" not in latest
    initial = changes.filter(pl.col("release_id") == first.release_id)
    assert set(initial["what"]) >= {"venues", "papers", "metrics"} and initial["previous_id"].is_null().all()


def test_metric_code_is_in_the_release_but_docstrings_and_comments_are_not(tmp_path, monkeypatch):
    """Changing GEM's evaluation prompt (written in code) moves the release; rewording a docstring or
    a comment does not."""
    import shutil

    from tasks.stages.validate import releases

    root = tmp_path / "tasks"
    shutil.copytree(Path(releases.__file__).resolve().parents[2] / "metrics", root / "metrics")
    shutil.copytree(Path(releases.__file__).resolve().parents[2] / "judgments", root / "judgments")
    monkeypatch.setattr(releases, "__file__", str(root / "stages" / "validate" / "releases.py"))
    before = releases.metric_code()
    prompts = root / "metrics" / "prompts.py"
    text = prompts.read_text()
    prompts.write_text('"""Reworded module docstring."""\n# a new comment\n' + text.split('"""', 2)[2])
    after = releases.metric_code()
    assert {k for k in before if before[k] != after.get(k)} == set()
    head, code = text[: text.index('"""', 3) + 3], text[text.index('"""', 3) + 3 :]
    assert "review" in code                                        # the prompt's own words, in code
    prompts.write_text(head + code.replace("review", "assessment", 1))
    assert releases.metric_code() != before and releases.digest([{}, releases.metric_code()]) != releases.digest([{}, before])
