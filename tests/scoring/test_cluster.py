"""Evaluation-LM work on a Dask cluster: one worker per device, the `GPU` resource as the bound, the
start check of the workers (tasks/scoring/cluster.py). No GPU here: two devices are simulated by two
worker processes started with different CUDA_VISIBLE_DEVICES, which the tasks read from inside."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tasks.core.config import ScoreConfig
from tasks.scoring.cluster import ClusterError, check_workers, worker_specs

ROOT = Path(__file__).resolve().parents[2]


def test_one_worker_per_device_each_seeing_its_own() -> None:
    specs = worker_specs(["0", "GPU-9baca7f5"], workers=5)
    assert list(specs) == ["gpu-0", "gpu-GPU-9baca7f5"]
    assert [s["options"]["env"] for s in specs.values()] == [{"CUDA_VISIBLE_DEVICES": "0"},
                                                             {"CUDA_VISIBLE_DEVICES": "GPU-9baca7f5"}]
    assert all(s["options"]["resources"] == {"GPU": 1} and s["options"]["nthreads"] == 1 for s in specs.values())
    cpu = worker_specs([], workers=3)
    assert len(cpu) == 3 and all("env" not in s["options"] and s["options"]["resources"] == {"GPU": 1}
                                 for s in cpu.values())


def test_check_workers_wants_a_gpu_resource_and_the_data_folder(tmp_path) -> None:
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as bare, \
            Client(bare) as client, pytest.raises(ClusterError, match="holds a 'GPU' resource"):
        check_workers(client, tmp_path)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None,
                      resources={"GPU": 1}) as cluster, Client(cluster) as client:
        assert check_workers(client, tmp_path / "data") == 2
    assert list((tmp_path / "data").iterdir()) == [], "the probe files are gone"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_workers(address: str, n: int, timeout: float = 120) -> None:
    from distributed import Client

    with Client(address, timeout=timeout) as client:
        client.wait_for_workers(n, timeout=timeout)


@pytest.fixture
def two_device_cluster(tmp_path):
    """A scheduler and two worker processes started here, as on other machines: worker i with
    CUDA_VISIBLE_DEVICES=i, its own working folder, two threads and one GPU resource; (address, env)."""
    from prefect.settings import PREFECT_API_URL

    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False",
           "OMP_NUM_THREADS": "1", "PREFECT_API_URL": PREFECT_API_URL.value() or ""}
    logs = tmp_path / "dask-logs"
    logs.mkdir()
    started = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                 "--port", str(port), "--no-dashboard"], env=env,
                                stdout=(logs / "scheduler").open("w"), stderr=subprocess.STDOUT)]
    try:
        for device in ("0", "1"):
            folder = tmp_path / f"worker-{device}"
            folder.mkdir()
            started.append(subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_worker", address, "--name", f"gpu-{device}",
                 "--nthreads", "2", "--resources", "GPU=1", "--no-dashboard", "--no-nanny"],
                env={**env, "CUDA_VISIBLE_DEVICES": device}, cwd=folder,
                stdout=(logs / f"worker-{device}").open("w"), stderr=subprocess.STDOUT))
        _wait_for_workers(address, 2)
        yield address
    finally:
        for process in reversed(started):
            process.terminate()
        for process in reversed(started):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def _requests(n_prompts: int, per_prompt: int) -> pl.DataFrame:
    rows = [{"key": f"k{p}-{c}", "system": "You rate papers.", "user": f"Paper {p}: a study of topic {p}.",
             "continuation": f"Rating {c}: the method {'holds' if c % 2 else 'fails'}."}
            for p in range(n_prompts) for c in range(per_prompt)]
    return pl.DataFrame(rows)


def _max_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], x[1]))
    held = peak = 0
    for _, step in events:
        held += step
        peak = max(peak, held)
    return peak


@pytest.mark.slow
def test_two_workers_on_a_remote_scheduler_each_score_shards_on_their_own_device(
        tmp_path, prefect_harness, two_device_cluster, monkeypatch) -> None:
    """Two worker processes, each seeing another CUDA_VISIBLE_DEVICES, score the shards of one run
    through the pipeline's fan-out; inside every task the worker saw its own device alone; the GPU
    resource held: never two shards at once on one worker (each has two threads), never more than two
    in all; the results are those of scoring in this process."""
    from distributed import Client

    from tasks.lm import ModelSpec
    from tasks.scoring.fanout import fan_out
    from tasks.scoring.shards import read_results, run_in_process, write_request_shards

    address = two_device_cluster
    monkeypatch.chdir(tmp_path)
    with Client(address) as client:
        with pytest.raises(ClusterError, match=r"^Dask worker gpu-[01] \(tcp://[^)]*\) cannot read and write the run's "
                                               r"data folder data/score: .*No such file.*; 1 other worker\(s\) neither$"):
            check_workers(client, Path("data/score"))   # relative: each worker's own working folder
        assert check_workers(client, tmp_path / "data") == 2

    requests = _requests(n_prompts=8, per_prompt=2)
    names = write_request_shards(requests, tmp_path / "requests", shard_size=2)
    assert len(names) == 8
    run = fan_out(ScoreConfig(task_runner="dask", runner_address=address))
    statuses = run(tmp_path / "requests", tmp_path / "results", names, ModelSpec(), 512)

    scored = [s for s in statuses if s["status"] == "scored"]
    assert len(scored) == 8
    seen = {s["visible_devices"] for s in scored}
    assert seen == {"0", "1"}, f"each worker sees its own device alone: {seen}"
    assert {s["device"] for s in scored} == {"cpu"}   # no CUDA here: the device each would pin is cuda:0
    by_worker: dict[int, list[tuple[float, float]]] = {}
    for s in scored:
        by_worker.setdefault(s["pid"], []).append((s["started"], s["ended"]))
    assert len(by_worker) == 2
    assert all(_max_overlap(spans) == 1 for spans in by_worker.values()), "one GPU resource: one shard at a time"
    assert _max_overlap([span for spans in by_worker.values() for span in spans]) <= 2

    here = run_in_process(tmp_path / "requests", tmp_path / "here", names, ModelSpec(), 512)
    assert all(s["status"] == "scored" for s in here)
    there, mine = read_results(tmp_path / "results", names), read_results(tmp_path / "here", names)
    assert there.sort("key").select("key", "n_tokens").equals(mine.sort("key").select("key", "n_tokens"))
    assert (there.sort("key")["logprob"] - mine.sort("key")["logprob"]).abs().max() < 1e-3
