"""Which GPU a process's models go to: one device per worker, never the default one for all.

A worker started for one GPU sees that GPU alone (`CUDA_VISIBLE_DEVICES=<id>`, as a Dask worker that
GRE-bench starts does: tasks/scoring/cluster.py), so its device is `cuda:0`; a process that sees
several GPUs takes the one `GREBENCH_CUDA_DEVICE` names (an index among those it sees), else the
first. Every model of the process goes there whole: the plain model with `.to(device)`, a 4-bit NF4
model with `device_map={"": index}` (never `device_map="auto"`, which spreads one model's layers
over every visible GPU, so that eight workers of an 8-GPU machine would each hold a slice of all eight).

Nothing here imports torch at module level, and nothing here touches CUDA unless asked what it
sees: a CPU machine reads the environment only.
"""

from __future__ import annotations

import os

DEVICE_ENV = "GREBENCH_CUDA_DEVICE"


def device_index_env() -> int:
    """The GPU index this process was told to use (`GREBENCH_CUDA_DEVICE`), 0 when unset; refuses a
    value that is not a non-negative integer, in one line."""
    raw = os.environ.get(DEVICE_ENV, "").strip()
    if not raw:
        return 0
    if not raw.isdigit():
        raise ValueError(f"{DEVICE_ENV}={raw!r} is not a GPU index (0, 1, ...): an index among the GPUs this "
                         f"process sees (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')!r})")
    return int(raw)


def cuda_device() -> str:
    """This process's own GPU, as torch names it: `cuda:<index>` (`device_index_env`)."""
    return f"cuda:{device_index_env()}"


def pinned(device: str) -> str:
    """`device` with a CUDA device made explicit: "cuda" -> this process's `cuda:<i>`; others unchanged."""
    return cuda_device() if device == "cuda" else device


def is_cuda(device: str) -> bool:
    return device == "cuda" or device.startswith("cuda:")


def device_index(device: str) -> int:
    """The GPU index of a pinned CUDA device ("cuda:3" -> 3); a device without one is an error."""
    head, _, index = device.partition(":")
    if head != "cuda" or not index.isdigit():
        raise ValueError(f"not a pinned CUDA device: {device!r} (expected 'cuda:<index>')")
    return int(index)


def visible_devices() -> list[str]:
    """The GPUs this process may hand out, one worker each, as CUDA_VISIBLE_DEVICES names them: its own
    CUDA_VISIBLE_DEVICES list when set (indices or UUIDs), else 0..n-1 for the n GPUs torch sees (none
    on a machine without CUDA)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip() and d.strip() != "-1"]
    try:
        import torch
    except ImportError:
        return []
    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def where_this_runs(device: str) -> dict[str, object]:
    """Where a job ran, for its status: host, pid, the GPUs the process saw (its CUDA_VISIBLE_DEVICES as
    `visible_devices` lists them; empty on a CPU) and the device its model was on."""
    import socket

    return {"host": socket.gethostname(), "pid": os.getpid(), "visible_devices": ",".join(visible_devices()),
            "device": device}
