"""A crash that must not block the next run: `grebench run --stages score` killed with SIGKILL while it holds the evaluation-LM slot
(one shard's results written, more to come); the rerun, with the same Prefect home, finishes within a
bound and writes every pair once, each equal to a fresh computation. Before the slot files
(tasks/core/slots.py) the killed run's Prefect concurrency slot stayed taken and the rerun waited
forever."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import polars as pl
import pytest

from tasks.core.config import load_config
from tasks.core.layout import stage_dir
from tasks.core.slots import try_slot
from tasks.lm import LoglikelihoodRequest, eval_lm
from tasks.metrics import get
from tasks.metrics.gem import build_requests
from tasks.metrics.resources import eval_spec
from tasks.scoring.shards import eval_lm_slots
from tasks.stages.score.stage import read_inputs
from tests.crash import ROOT, killed_when
from tests.scoring_data import write_pipeline

CLI = "import runpy; runpy.run_module('flows.cli.main', run_name='__main__')"


def slot_held(cfg) -> bool:
    """Whether another process holds a slot of the evaluation-LM limit (probed without waiting)."""
    for path in eval_lm_slots(cfg).paths():
        if not path.exists():
            continue
        fd = try_slot(path)
        if fd is None:
            return True
        os.close(fd)
    return False


@pytest.mark.slow
def test_a_score_stage_killed_holding_the_slot_then_a_rerun_finishes(tmp_path, monkeypatch):
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect"))    # the killed run's database, kept for the rerun
    monkeypatch.chdir(tmp_path)
    config = write_pipeline(tmp_path, n_papers=2, n_reviews=2, metrics=["gem_raw"], shard_size=2)
    cfg = load_config(config).for_pipeline("t")
    folder = stage_dir(cfg, "t", "score")
    args = ["run", "t", "--stages", "score", "-c", str(config)]

    def mid_score() -> bool:
        return slot_held(cfg) and any((folder / "results").glob("*.parquet"))

    killed_when(CLI, args, mid_score, timeout=300)
    assert not (folder / "scores.parquet").exists()

    rerun = subprocess.run([sys.executable, "-c", CLI, *args], cwd=tmp_path, capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    scores = pl.read_parquet(folder / "scores.parquet")
    assert scores.height == 2 * 2 and not scores.select("candidate", "reference").is_duplicated().any()
    assert set(scores["eval_lm"]) == {"smollm2|float32|none"} and all(math.isfinite(s) for s in scores["score"])

    inputs = read_inputs(cfg, "t")
    pairs, requests = build_requests(inputs.candidates, inputs.references, inputs.synopses, get(["gem_raw"]),
                                     eval_spec(cfg.score).resolved().key)
    by_key = {r["key"]: LoglikelihoodRequest(r["system"], r["user"], r["continuation"])
              for r in requests.iter_rows(named=True)}
    for pair in pairs.iter_rows(named=True):
        cond, marg = eval_lm(cfg.score).loglikelihood([by_key[pair["cond_key"]], by_key[pair["marg_key"]]])
        row = scores.filter((pl.col("candidate") == pair["candidate"]) & (pl.col("reference") == pair["reference"]))
        assert row["score"][0] == pytest.approx(cond.logprob - marg.logprob, abs=1e-3)
