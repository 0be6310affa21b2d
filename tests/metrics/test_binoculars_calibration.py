"""The Binoculars threshold picked at a stated false-positive rate on a made-up labelled set, the
command that writes it into the config, and the flags that show where their threshold comes from."""

from __future__ import annotations

import math
import tomllib

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from flows.cli.main import app
from tasks.core.config import ReferenceFlagsConfig
from tasks.core.config_edit import set_keys
from tasks.core.errors import ConfigError
from tasks.metrics.review_quality.binoculars import calibrate
from tasks.testing.pipelines import results_config

runner = CliRunner()


def test_the_threshold_flags_at_most_the_asked_share_of_human_reviews():
    human = [float(v) for v in range(1, 101)]          # 1 .. 100
    ai = [0.5, 1.5, 2.5, 3.5, 50.0]
    got = calibrate(human, ai, fpr=0.05)
    assert got.threshold == 6.0                        # below 6: exactly 1..5, 5 of 100
    assert got.human_flagged == 0.05 and got.ai_flagged == pytest.approx(0.8)
    assert calibrate(human, ai, fpr=0.0).threshold == 1.0 and calibrate(human, ai, fpr=0.0).human_flagged == 0.0
    assert calibrate(human, ai, fpr=0.999).human_flagged <= 0.999
    tied = calibrate([1.0, 2.0, 2.0, 2.0, 5.0], [], fpr=0.5)   # 2 allowed, but 2.0 is tied three times
    assert tied.threshold == 2.0 and tied.human_flagged == 0.2 and math.isnan(tied.ai_flagged)
    rng = np.random.default_rng(0)
    scores = rng.normal(1.0, 0.1, 1000).tolist() + [math.nan]
    for fpr in (0.01, 0.1, 0.3):
        picked = calibrate(scores, rng.normal(0.7, 0.1, 100).tolist(), fpr)
        assert fpr - 0.002 <= picked.human_flagged <= fpr and picked.n_human == 1000
    with pytest.raises(ValueError, match="no human review"):
        calibrate([math.nan], [0.1], 0.1)


def test_set_keys_keeps_the_rest_of_the_file(tmp_path):
    path = tmp_path / "pipelines.toml"
    path.write_text("# top\n[score.reference_flags]\nenabled = true   # kept\nthreshold = 0.9\n\n[qualify]\nitems = 3\n")
    set_keys(path, "score.reference_flags", {"single_threshold": 0.75, "threshold": 0.8})
    set_keys(path, "score.review_quality", {"ai_single_threshold": 0.7, "ai_single_threshold_source": "x"})
    text = path.read_text()
    assert "# top" in text and "enabled = true   # kept" in text
    data = tomllib.loads(text)
    assert data["score"]["reference_flags"] == {"enabled": True, "threshold": 0.8, "single_threshold": 0.75}
    assert data["qualify"] == {"items": 3} and data["score"]["review_quality"]["ai_single_threshold"] == 0.7


def test_calibrate_binoculars_writes_the_threshold_and_its_source(tmp_path):
    config = results_config(tmp_path / "pipelines.toml", "[score.reference_flags]\nenabled = true\n")
    pl.DataFrame({"binoculars": [float(v) / 100 for v in range(50, 150)]}).write_parquet(tmp_path / "human.parquet")
    pl.DataFrame({"binoculars": [0.3, 0.4, 0.52, 0.9]}).write_csv(tmp_path / "ai.csv")
    result = runner.invoke(app, ["calibrate", "binoculars", "--human", str(tmp_path / "human.parquet"),
                                 "--ai", str(tmp_path / "ai.csv"), "--fpr", "0.02", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "flags 2.000% of 100 human reviews" in result.stdout and "50.000% of 4 AI-written" in result.stdout   # 0.3, 0.4 below 0.52
    flags = tomllib.loads(config.read_text())["score"]["reference_flags"]
    # the default pair is the evaluation LM twice: the single-model form gets its own threshold
    assert flags["single_threshold"] == pytest.approx(0.52) and "threshold" not in flags
    assert flags["single_threshold_source"].startswith("calibrated: single-model form")
    assert "FPR 0.02 on 100 human / 4 AI reviews" in flags["single_threshold_source"]
    bad = runner.invoke(app, ["calibrate", "binoculars", "--human", str(tmp_path / "none.parquet"),
                              "--ai", str(tmp_path / "ai.csv"), "--config", str(config)])
    assert bad.exit_code == 2 and "no such file" in bad.output


def test_each_form_has_its_own_threshold_and_source():
    flags = ReferenceFlagsConfig()
    assert flags.for_form(single=False) == (0.9015, flags.threshold_source)
    line, source = flags.for_form(single=True)
    assert line is None and source.startswith("none: the single-model form is not calibrated")
    calibrated = ReferenceFlagsConfig(single_threshold=0.7, single_threshold_source="calibrated: here")
    assert calibrated.for_form(single=True) == (0.7, "calibrated: here")


def test_ai_rate_takes_the_threshold_of_its_form():
    from tasks.core.config import ReviewQualityConfig
    from tasks.metrics.quality import ai_threshold

    two = ReviewQualityConfig(binoculars_observer="a", binoculars_performer="b")
    assert ai_threshold(two, ("a", "b")) == 0.9015
    assert math.isnan(ai_threshold(two, ("a", "a")))                   # one LM twice, uncalibrated: no line
    calibrated = ReviewQualityConfig(ai_single_threshold=0.8)
    assert ai_threshold(calibrated, ("a", "a")) == 0.8


@pytest.mark.parametrize(("human", "line"), [
    (lambda p: pl.DataFrame({"binoculars": [[0.5, 0.6], [0.7]]}).write_parquet(p.with_suffix(".parquet")),
     "holds List"),
    (lambda p: p.with_suffix(".csv").write_bytes(b'binoculars\n"0.5\n0.6,,\x00\xff'), "is damaged or not what"),
    (lambda p: p.with_suffix(".csv").write_bytes(b""), "is damaged or not what"),
    (lambda p: pl.DataFrame({"binoculars": [-1.7e308, 0.9, 1.0]}).write_csv(p.with_suffix(".csv")),
     "beyond +-1e+06"),
    (lambda p: pl.DataFrame({"binoculars": [0.1, 0.2, 0.3]}).write_csv(p.with_suffix(".csv")),
     "flags none of the 2 AI-written reviews"),
], ids=["list_column", "malformed_csv", "empty_csv", "huge_negative", "no_separation"])
def test_a_file_calibration_cannot_use_is_one_line_and_writes_nothing(tmp_path, human, line):
    config = tmp_path / "pipelines.toml"
    config.write_text('[paths]\ndata_dir = "data"\n')
    human(tmp_path / "human")
    path = next(tmp_path.glob("human.*"))
    pl.DataFrame({"binoculars": [0.9, 0.95]}).write_csv(tmp_path / "ai.csv")
    result = runner.invoke(app, ["calibrate", "binoculars", "--human", str(path), "--ai", str(tmp_path / "ai.csv"),
                                 "--fpr", "0", "--config", str(config)])
    assert result.exit_code == 2 and result.output.startswith("error:"), (result.output, result.exception)
    assert result.output.count("\n") == 1 and line in result.output, result.output
    assert "threshold" not in config.read_text()


@pytest.mark.parametrize("declared", [
    "[score]\nreference_flags.enabled = true\n",                   # a dotted key under [score]
    "score.reference_flags.enabled = true\n",                      # a dotted key at the top
    "[score]\nreference_flags = { enabled = true }\n",              # an inline table
    "[score.reference_flags]\nenabled = true\n",                    # a table header
])
def test_set_keys_finds_the_table_however_the_file_declares_it(tmp_path, declared):
    path = tmp_path / "pipelines.toml"
    path.write_text(f"# mine\n{declared}\n[qualify]\nitems = 3\n")
    set_keys(path, "score.reference_flags", {"single_threshold": 0.75, "single_threshold_source": "x"})
    data = tomllib.loads(path.read_text())
    assert data["score"]["reference_flags"] == {"enabled": True, "single_threshold": 0.75, "single_threshold_source": "x"}
    assert data["qualify"] == {"items": 3} and path.read_text().startswith("# mine\n")


def test_set_keys_writes_any_file_name_toml_can_hold_and_refuses_a_write_it_cannot(tmp_path):
    path = tmp_path / "pipelines.toml"
    path.write_text("[qualify]\nitems = 3\n")
    for name in ("human-\U0001F600.csv", "bytes-\udcff.csv", 'quote"back\\slash\nline.csv', "pair-\ud83d\ude00.csv"):
        set_keys(path, "score.review_quality", {"ai_single_threshold_source": f"calibrated on {name}"})
        source = tomllib.loads(path.read_text())["score"]["review_quality"]["ai_single_threshold_source"]
        assert source == f"calibrated on {name}".replace("\udcff", "\ufffd").replace("\ud83d\ude00", "\U0001F600")
    path.write_text("[score]\nreference_flags = 3\n")
    before = path.read_bytes()
    with pytest.raises(ConfigError, match="not a table"):
        set_keys(path, "score.reference_flags", {"threshold": 0.8})
    assert path.read_bytes() == before


def test_calibrate_binoculars_with_a_non_bmp_file_name_writes_a_config_every_command_reads(tmp_path):
    config = tmp_path / "pipelines.toml"
    config.write_text('[paths]\ndata_dir = "data"\ndatabase = "data/r.duckdb"\n\n[score]\nreference_flags.enabled = true\n')
    human = tmp_path / "human-\U0001F600.parquet"
    pl.DataFrame({"binoculars": [float(v) / 100 for v in range(50, 150)]}).write_parquet(human)
    pl.DataFrame({"binoculars": [0.3, 0.4, 0.52, 0.9]}).write_csv(tmp_path / "ai.csv")
    result = runner.invoke(app, ["calibrate", "binoculars", "--human", str(human), "--ai", str(tmp_path / "ai.csv"),
                                 "--fpr", "0.02", "--config", str(config)])
    assert result.exit_code == 0, result.output
    flags = tomllib.loads(config.read_text(encoding="utf-8"))["score"]["reference_flags"]
    assert flags["enabled"] is True and "human-\U0001F600.parquet" in flags["single_threshold_source"]
    assert runner.invoke(app, ["calibrate", "binoculars", "--human", str(human), "--ai", str(tmp_path / "ai.csv"),
                               "--fpr", "0.02", "--dry-run", "--config", str(config)]).exit_code == 0
