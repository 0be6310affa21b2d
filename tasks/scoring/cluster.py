"""Evaluation-LM work on a Dask cluster: one worker per GPU, bounded by Dask worker resources.

On the thread runner the evaluation-LM tasks are bounded by slot files under the data folder
(tasks/core/slots.py), which hold on one machine only. On a Dask cluster the bound is the cluster's
own: every worker that may hold an evaluation LM carries one `GPU` resource (Dask's abstract worker
resources), and every evaluation-LM task is submitted asking for `resources={"GPU": 1}`, so the
scheduler never runs more such tasks on a worker than it has GPUs, whichever machine the worker is
on. A cluster GRE-bench starts itself (`local_cluster`) is dask-cuda's one worker per GPU: a
worker process per device, each started with `CUDA_VISIBLE_DEVICES` naming its device alone (so it
loads its models on `cuda:0`, its own GPU: tasks/lm/devices.py) and one `GPU` resource; on a
machine without CUDA, `[score] workers` processes with one `GPU` resource each (one evaluation LM per
process). A cluster started by hand gives each worker the resource itself:

    CUDA_VISIBLE_DEVICES=3 dask worker tcp://scheduler:8786 --nthreads 1 --resources GPU=1

`check_workers` runs when a flow first submits to a cluster: some worker must hold the resource (else
every task would wait forever), and every worker holding it must read a file this process wrote into
the run's data folder and write one back there (the shards are passed between them as files), else
the run stops in one line naming the worker.
"""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tasks.core.errors import GrebenchError

RESOURCE = "GPU"
EVAL_LM_RESOURCES = {RESOURCE: 1}


class ClusterError(GrebenchError):
    """A Dask cluster that cannot run the evaluation-LM tasks: one line naming the worker at fault."""


def worker_specs(devices: Sequence[str], workers: int) -> dict[str, dict[str, Any]]:
    """SpecCluster worker specs: one nanny-managed process per device of `devices` (seeing that device
    alone), or, with no devices, `workers` processes; each with one thread and one `GPU` resource."""
    from distributed import Nanny

    base = {"nthreads": 1, "resources": dict(EVAL_LM_RESOURCES), "host": "127.0.0.1", "dashboard": False,
            "dashboard_address": None}
    if devices:
        return {f"gpu-{device}": {"cls": Nanny, "options": {**base, "env": {"CUDA_VISIBLE_DEVICES": str(device)}}}
                for device in devices}
    return {f"worker-{i}": {"cls": Nanny, "options": dict(base)} for i in range(workers)}


def local_cluster(devices: Sequence[str] = (), workers: int = 1, **kwargs: Any) -> Any:
    """A Dask cluster on this machine with the workers of `worker_specs` (prefect-dask's `cluster_class`)."""
    from distributed import Scheduler, SpecCluster

    scheduler = {"cls": Scheduler, "options": {"host": "127.0.0.1", "port": 0, "dashboard": False,
                                               "dashboard_address": None}}
    return SpecCluster(workers=worker_specs(devices, workers), scheduler=scheduler, **kwargs)


def _probe(probe: str, token: str, dask_worker: Any = None) -> str:
    """On a worker: read the probe file the client wrote (`token` inside) and write one back beside it;
    the path written. Raises where the folder cannot be read or written, or holds another probe."""
    path = Path(probe)
    seen = path.read_text().strip()
    if seen != token:
        raise OSError(f"{path} holds {seen[:40]!r}, not this run's probe: another folder by that path")
    address = getattr(dask_worker, "address", "worker")
    answer = path.with_name(f"{path.name}.{hashlib.sha256(address.encode()).hexdigest()[:12]}")
    answer.write_text(f"{token} {address}")
    return str(answer)


def _names(info: dict[str, Any]) -> dict[str, str]:
    return {address: f"{w.get('name', address)} ({address})" for address, w in info["workers"].items()}


def check_workers(client: Any, folder: Path) -> int:
    """Refuse a cluster whose evaluation-LM tasks could not run: no worker with a `GPU` resource, or a
    worker holding one that cannot read and write `folder` (the path as the tasks will get it). The
    number of workers holding the resource."""
    info = client.scheduler_info(n_workers=-1)
    where = info.get("address", "?")
    names = _names(info)
    holders = [a for a, w in info["workers"].items() if (w.get("resources") or {}).get(RESOURCE, 0) >= 1]
    if not holders:
        raise ClusterError(f"no worker of the Dask cluster at {where} ({len(names)} worker(s)) holds a {RESOURCE!r} "
                           f"resource, so no evaluation-LM task could start: start each worker with --resources "
                           f"{RESOURCE}=1 (one worker per GPU)")
    folder = Path(folder)
    token = uuid.uuid4().hex
    probe = folder / f".worker-probe-{token}"
    folder.mkdir(parents=True, exist_ok=True)
    probe.write_text(token)
    answers: dict[str, Any] = {}
    try:
        answers = client.run(_probe, str(probe), token, workers=holders, on_error="return")
        failed = [(address, why) for address in holders
                  if (why := _fault(answers.get(address, RuntimeError("no answer")), token, folder))]
    finally:
        for leftover in [probe, *(Path(a) for a in answers.values() if isinstance(a, str))]:
            with contextlib.suppress(OSError):
                leftover.unlink()
    if failed:
        (address, why), more = failed[0], len(failed) - 1
        raise ClusterError(f"Dask worker {names[address]} cannot read and write the run's data folder {folder}: "
                           f"{why}; every worker must see it at the same path (a shared filesystem)"
                           + (f"; {more} other worker(s) neither" if more else ""))
    return len(holders)


def _fault(answer: Any, token: str, folder: Path) -> str | None:
    """What is wrong with a worker's probe answer (an exception, or the path it wrote), or None."""
    if isinstance(answer, BaseException):
        return str(answer).splitlines()[0] if str(answer) else type(answer).__name__
    written = Path(answer)
    if not written.is_file() or written.read_text().split()[:1] != [token]:
        return f"what it wrote ({answer}) is not in this process's {folder}: another folder by that path"
    return None


def dask_client() -> Any:
    """The Dask client of the task runner of the flow running now, or None when it is not a Dask one."""
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    runner = getattr(context, "task_runner", None)
    with contextlib.suppress(ImportError):
        from prefect_dask import DaskTaskRunner

        if isinstance(runner, DaskTaskRunner):
            return runner.client
    return None


@contextlib.contextmanager
def eval_lm_placement(folder: Path) -> Iterator[None]:
    """Around a flow's submission of evaluation-LM tasks: on a Dask task runner, check its workers
    (`check_workers` on `folder`) and ask `resources={"GPU": 1}` for every task submitted inside; on
    any other runner, nothing (its bound is the slot files)."""
    client = dask_client()
    if client is None:
        yield
        return
    import dask

    check_workers(client, folder)
    with dask.annotate(resources=EVAL_LM_RESOURCES):
        yield
