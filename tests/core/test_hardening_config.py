"""Config mistakes: one line naming the key and the file, before any stage runs."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from flows.cli.main import app

runner = CliRunner()
PIPELINE = "[pipelines.p]\nvenues = ['V/2025/C']\nstages = ['ingest', 'curate', 'materialize']\n"


def run(tmp_path, text: str | bytes, *args: str, command: str = "run"):
    path = tmp_path / "pipelines.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    extra = ["p", *args] if command == "run" else list(args)
    result = runner.invoke(app, [command, *extra, "-c", str(path)])
    return result, path


def assert_one_line(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.output.count("\n") == 1, result.output
    for needle in needles:
        assert needle in result.output, result.output


CASES = {
    "non_utf8": (b"[curate]\n# caf\xe9\nseed = 1\n" + PIPELINE.encode(), ["pipelines.toml: line 2", "UTF-8"]),
    "empty_scale": ("[curate]\ncommon_scale = []\n" + PIPELINE, ["pipelines.toml", "curate.common_scale"]),
    "unsorted_scale": ("[curate]\ncommon_scale = [5, 1]\n" + PIPELINE, ["curate.common_scale"]),
    "rating_off_scale": ("[venues.'V/2025/C']\nrating_map = { '1' = 1, '2' = 2 }\n" + PIPELINE,
                         ["pipelines.toml", "venues.V/2025/C.rating_map", "'2'", "common_scale"]),
    "nan_confidence": ("[curate]\nmin_confidence = nan\n" + PIPELINE, ["pipelines.toml", "curate.min_confidence"]),
    "inf_variance": ("[curate]\nmax_rating_variance = inf\n" + PIPELINE, ["curate.max_rating_variance"]),
    "impossible_confidence": ("[curate]\nmin_confidence = 7\n" + PIPELINE, ["curate", "min_confidence"]),
    "nan_alpha": ("[validate]\nalpha = nan\n" + PIPELINE, ["validate.alpha"]),
    "bad_timezone": ("[schedule]\ntimezone = 'Mars/Olympus'\n" + PIPELINE, ["pipelines.toml", "schedule.timezone"]),
    "stage_twice": ("[pipelines.p]\nvenues = ['V']\nstages = ['ingest', 'ingest']\n",
                    ["pipelines.toml", "pipelines.p.stages", "more than once"]),
    "bad_override": (PIPELINE + "[pipelines.p.curate]\nmin_reviews = 'many'\n",
                     ["pipelines.toml", "pipelines.p.curate.min_reviews"]),
    "nan_override": (PIPELINE + "[pipelines.p.curate]\nmin_confidence = nan\n",
                     ["pipelines.toml", "pipelines.p.curate.min_confidence"]),
    "negative_seed": ("[validate]\nseed = -1\n" + PIPELINE, ["pipelines.toml", "validate.seed"]),
    "huge_seed": ("[curate]\nseed = 4294967296\n" + PIPELINE, ["curate.seed"]),
    "negative_negatives_seed": ("[score]\nnegatives_seed = -1\n" + PIPELINE, ["score.negatives_seed"]),
    "negative_qualify_seed": ("[qualify]\nseed = -5\n" + PIPELINE, ["qualify.seed"]),
    "negative_injection_seed": ("[generate.injection]\nseed = -1\n" + PIPELINE, ["generate.injection.seed"]),
    "negative_weight": ("[score]\njudge_weights = { 'a/x' = -0.9, 'b/y' = 1.0 }\n" + PIPELINE,
                        ["score.judge_weights"]),
    "huge_weight": ("[score]\njudge_weights = { 'a/x' = 1e308, 'b/y' = 1e308 }\n" + PIPELINE,
                    ["score.judge_weights"]),
    "zero_weights": ("[score]\njudge_weights = { 'a/x' = 0.0 }\n" + PIPELINE, ["score.judge_weights", "every weight is 0"]),
    "deep_arrays": ("[curate]\nx = " + "[" * 100_000 + "]" * 100_000 + "\n" + PIPELINE,
                    ["pipelines.toml: line 2", "nested more than 32 deep"]),
    "deep_tables": ("[curate]\nx = " + "{a = " * 100_000 + "1" + "}" * 100_000 + "\n" + PIPELINE,
                    ["pipelines.toml: line 2", "nested more than 32 deep"]),
    "long_integer": ("[curate]\nseed = 1" + "0" * 5000 + "\n" + PIPELINE,
                     ["pipelines.toml: line 2", "a number of more than 64 digits"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_config_mistake_is_one_line_with_key_and_file(tmp_path, case):
    text, needles = CASES[case]
    result, _ = run(tmp_path, text)
    assert_one_line(result, *needles)
    assert not (tmp_path / "data").exists()      # no stage ran


@pytest.mark.parametrize("case", ["bad_override", "stage_twice", "non_utf8"])
def test_pipelines_command_exits_non_zero_on_a_bad_config(tmp_path, case):
    text, needles = CASES[case]
    result, _ = run(tmp_path, text, command="pipelines")
    assert_one_line(result, *needles)


def test_data_dir_that_is_a_file(tmp_path):
    (tmp_path / "data").write_text("not a folder")
    result, _ = run(tmp_path, "[paths]\ndata_dir = 'data'\n" + PIPELINE)
    assert_one_line(result, "pipelines.toml", "paths.data_dir", "is a file")


def test_data_dir_under_a_file(tmp_path):
    (tmp_path / "blocker").write_text("x")
    result, _ = run(tmp_path, "[paths]\ndata_dir = 'blocker/data'\n" + PIPELINE)
    assert_one_line(result, "paths.data_dir", "is a file")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_unwritable_database_folder(tmp_path):
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        result, _ = run(tmp_path, "[paths]\ndatabase = 'ro/db/grebench.duckdb'\n" + PIPELINE)
        assert_one_line(result, "paths.database", "not writable")
    finally:
        locked.chmod(0o700)


@pytest.mark.parametrize("key", ["data_dir", "database"])
def test_unwritable_place_even_for_root(tmp_path, key):
    target = "/proc/grebench/data" if key == "data_dir" else "/proc/grebench/grebench.duckdb"
    result, _ = run(tmp_path, f"[paths]\n{key} = '{target}'\n" + PIPELINE)
    assert_one_line(result, "pipelines.toml", f"paths.{key}", "/proc", "not writable")


def test_database_path_that_is_a_folder(tmp_path):
    (tmp_path / "data" / "grebench.duckdb").mkdir(parents=True)
    result, _ = run(tmp_path, PIPELINE)
    assert_one_line(result, "paths.database", "is a folder")


def test_database_folder_that_is_a_file(tmp_path):
    (tmp_path / "dbdir").write_text("x")
    result, _ = run(tmp_path, "[paths]\ndatabase = 'dbdir/grebench.duckdb'\n" + PIPELINE)
    assert_one_line(result, "paths.database", "is a file")


@pytest.mark.parametrize(("stages", "needle"), [
    (",", "empty stage name"),
    ("ingest,,curate", "empty stage name"),
    ("", "empty stage name"),
    ("score", "not in this pipeline"),
    ("curate,curate", "more than once"),
    ("cook", "unknown stage"),
])
def test_bad_stages_option(tmp_path, stages, needle):
    result, _ = run(tmp_path, PIPELINE, "--stages", stages)
    assert_one_line(result, "--stages", needle)
    assert not (tmp_path / "data").exists()


LIMITS = {
    "bootstrap_resamples": ("[validate]\nbootstrap_resamples = 10000000000\n", "validate.bootstrap_resamples"),
    "compare_resamples": ("[validate]\ncompare_resamples = 10000000000\n", "validate.compare_resamples"),
    "n_papers": ("[pipelines.p.synthetic]\nn_papers = 1000000000\n", "n_papers"),
    "reviews_per_paper": ("[pipelines.p.synthetic]\nreviews_per_paper = 100000\n", "reviews_per_paper"),
    "pdf_workers": ("[ingest]\npdf_workers = 100000\n", "ingest.pdf_workers"),
    "max_tokens": ("[preprocess]\nmax_tokens = 1000000000000\n", "preprocess.max_tokens"),
    "token_budget": ("[score]\ntoken_budget = 1000000000000\n", "score.token_budget"),
}


@pytest.mark.parametrize("case", sorted(LIMITS))
def test_a_setting_that_sizes_memory_or_time_is_bounded_when_the_config_loads(tmp_path, case):
    text, needle = LIMITS[case]
    started = __import__("time").monotonic()
    result, _ = run(tmp_path, PIPELINE + text, "--stages", "curate")
    assert_one_line(result, "pipelines.toml", needle, "less than or equal")
    assert __import__("time").monotonic() - started < 30


@pytest.mark.parametrize(("text", "needle"), [
    ("[score.eval_server]\nbackend = 'openai'\napi = 'completions'\nmodel = 'smollm2'\n"
     "base_url = 'http://127.0.0.1:9/v1'\n", "name the served model"),
    ("[preprocess]\nbackend = 'anthropic'\nmodel = 'claude-x'\nbatch_invariant = true\n",
     "batch_invariant = true shapes local decoding only"),
    ("[preprocess]\nbackend = 'openai'\nmodel = 'gpt-x'\nbatch_invariant = true\n",
     "batch_invariant = true shapes local decoding only"),
])
def test_settings_an_api_backend_cannot_honour_stop_when_the_config_loads(tmp_path, text, needle):
    result, _ = run(tmp_path, text + PIPELINE, "--stages", "curate")
    assert_one_line(result, "pipelines.toml", needle)


def test_an_absolute_database_template_is_found_by_the_read_commands(tmp_path):
    from flows.cli.common import pipeline_databases, results_database
    from tasks.core.config import load_config

    where = tmp_path / "srv" / "gre[1]"   # a glob character in a folder name is a plain character
    path = tmp_path / "project" / "pipelines.toml"
    path.parent.mkdir()
    path.write_text(f'[paths]\ndata_dir = "data"\ndatabase = "{where}/{{pipeline}}/grebench.duckdb"\n' + PIPELINE)
    for command in (["report"], ["site"], ["plan", "--gap", "0.5"]):
        result = runner.invoke(app, [*command, "-c", str(path)])
        assert result.exit_code == 2 and "no results database yet" in result.output, (command, result.output)
        assert "Traceback" not in result.output and result.output.count("\n") == 1
    for name in ("a", "b"):
        (where / name).mkdir(parents=True)
        (where / name / "grebench.duckdb").write_bytes(b"")
    os.utime(where / "a" / "grebench.duckdb", (1, 1))
    cfg = load_config(path)
    assert pipeline_databases(cfg) == {n: where / n / "grebench.duckdb" for n in ("a", "b")}
    assert results_database(cfg, None) == (where / "b" / "grebench.duckdb",
                                           f"results of pipeline b ({where / 'b' / 'grebench.duckdb'}); also built: a "
                                           "(choose with --pipeline)")
