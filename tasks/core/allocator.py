"""The C allocator told to keep the memory torch frees, for the next tensor of the same size.

A forward pass on the CPU allocates and frees tensors of tens to hundreds of megabytes, over and
over. glibc's defaults hand each one back to the kernel when it is freed: anything above the mmap
threshold (at most 32 MiB) is a fresh mmap and munmap, and a thread other than the main one gets an
arena of its own, whose heaps hold at most 64 MiB, so everything larger than that is mmap'd whatever
the threshold. Each time, the kernel then faults and zeroes every page again. On the demo's engine
that was 7.6 s of system time in 67 s (`bench/speed/demo_engine.py --only gem`); on a 2-core machine it is
time the matmuls do not get.

`keep_freed_memory()` sets, once, before any thread allocates (tasks/__init__.py calls it on the
first import of the project): one arena for every thread, large blocks from the heap rather than
mmap, and freed memory kept up to 2 GiB above what is in use. Peak memory grows by what the
largest batch frees; a run's numbers are unchanged (only where the bytes come from changes).

It does nothing where the C library is not glibc, where the environment already sets glibc's
malloc tunables or MALLOC_* variables or preloads another allocator (LD_PRELOAD): the user's choice
wins; and with GREBENCH_MALLOC=system.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

M_TRIM_THRESHOLD = -1    # free memory kept at the top of the heap before it is given back
M_MMAP_THRESHOLD = -3    # blocks at least this large are mmap'd
M_ARENA_MAX = -8         # arenas the threads share

KEEP_BYTES = 2**31 - 1           # mallopt takes an int: 2 GiB kept
MMAP_ABOVE_BYTES = 1 << 30       # only blocks of a GiB or more are mmap'd


def user_chose_allocator() -> bool:
    """Whether the environment already says how glibc's malloc should behave."""
    if os.environ.get("GREBENCH_MALLOC", "").lower() == "system":
        return True
    if "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return True
    preloaded = "LD_PRELOAD" in os.environ   # jemalloc, tcmalloc, ...
    return preloaded or any(name.startswith("MALLOC_") and name.endswith("_") for name in os.environ)


@functools.cache
def keep_freed_memory() -> bool:
    """Set glibc's malloc to keep freed memory (once per process); whether it is set."""
    if not sys.platform.startswith("linux") or user_chose_allocator():
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    if not hasattr(libc, "gnu_get_libc_version"):   # not glibc: musl's mallopt does nothing
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return all(mallopt(param, value) == 1 for param, value in (
        (M_ARENA_MAX, 1), (M_MMAP_THRESHOLD, MMAP_ABOVE_BYTES), (M_TRIM_THRESHOLD, KEEP_BYTES)))


def give_back_freed_memory() -> bool:
    """Hand the memory kept by `keep_freed_memory` back to the kernel (glibc's malloc_trim): between
    two stages of a run, so what one stage freed does not stay resident under the next one's peak.
    Whether it was done."""
    if not keep_freed_memory():
        return False
    libc = ctypes.CDLL(None)
    libc.malloc_trim.argtypes = (ctypes.c_size_t,)
    libc.malloc_trim(0)
    return True
