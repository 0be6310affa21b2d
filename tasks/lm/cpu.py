"""What this CPU can do, read from /proc/cpuinfo: its instruction-set flags and whether it multiplies
bfloat16 natively. Only the standard library: the loader (tasks/lm/loading.py) and the bfloat16
kernels (tasks/lm/cpu_kernels.py) both ask, and neither needs the other for it.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")   # x86 instructions that multiply bfloat16 natively
CPU_BF16_ENV = "GREBENCH_CPU_BF16"            # "1" / "0": say whether the CPU has them (else /proc/cpuinfo)


def cpu_has_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU has bfloat16 matrix units (`CPU_BF16_FLAGS` among the flags of
    /proc/cpuinfo, or of `cpuinfo` when given); `GREBENCH_CPU_BF16` = 1 / 0 overrides the check
    (the tests pin it to 0, so their float32 tolerances hold on any machine)."""
    if cpuinfo is None:
        told = os.environ.get(CPU_BF16_ENV, "").strip()
        if told in ("0", "1"):
            return told == "1"
        if told:
            raise ValueError(f"{CPU_BF16_ENV} must be 0 or 1, not {told!r}")
    return any(flag in cpu_flags(cpuinfo) for flag in CPU_BF16_FLAGS)


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The instruction-set flags of this CPU (/proc/cpuinfo's, or those in `cpuinfo` when given)."""
    text = _cpuinfo() if cpuinfo is None else cpuinfo
    return {word for line in text.splitlines() if line.startswith("flags") for word in line.split()}


@functools.cache
def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:         # not Linux: no flags to read, so float32
        return ""


@functools.cache
def _libc_trim():
    """glibc's malloc_trim, or None where the C library is another (musl, macOS)."""
    import ctypes
    import ctypes.util

    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


_RELEASED = [0.0, 0.0]         # time.monotonic() of the last release, and the resident bytes it left
RELEASE_EVERY_S = 2.0         # at most one release this often: each makes the next batches fault their pages in again
RELEASE_AFTER_GROWTH = 128 << 20   # ... unless the process grew by this much since the last one: then at once


def resident_bytes() -> int:
    """This process's resident memory (/proc/self/statm), or 0 where there is no /proc."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def release_freed() -> None:
    """Give the pages of freed CPU tensors back to the system. glibc keeps the memory of freed mid-sized
    blocks in its heap, and batches of ever-changing shapes (one per batch of scored or generated
    requests) leave it scattered there, so a long loop's resident memory climbs by gigabytes that hold
    nothing; `malloc_trim(0)` returns every free page. After every batch that cost the demo's run 30 s
    of system time (pages faulted in again), so a release waits `RELEASE_EVERY_S` after the last one,
    unless the process has grown by `RELEASE_AFTER_GROWTH` since: between two releases on the clock the
    demo's GEM scoring left half a gigabyte of freed pages resident, and where the last batch landed
    against the clock decided the run's peak (docs/figures.md, the demo's peak memory).
    Lowering glibc's mmap threshold instead holds the peak too, but maps and zeroes every block afresh:
    a quarter more wall time on the demo's validation."""
    import time

    if (trim := _libc_trim()) is None:
        return
    if (time.monotonic() - _RELEASED[0] < RELEASE_EVERY_S
            and resident_bytes() - _RELEASED[1] < RELEASE_AFTER_GROWTH):
        return
    trim(0)
    _RELEASED[:] = [time.monotonic(), resident_bytes()]
