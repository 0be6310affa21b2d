"""The C allocator keeps what a thread frees (tasks/core/allocator.py): a block of 100 MB freed and
asked for again in a worker thread comes back without the kernel faulting its pages in again, as
a forward pass's activations do; GREBENCH_MALLOC=system leaves glibc's defaults (a fresh mmap each
time)."""

from __future__ import annotations

import ast
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHURN = """
import resource, threading
import tasks  # the first import of the project sets the allocator
from tasks.core import allocator
import numpy as np
faults = []
def churn():
    for _ in range(5):
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        block = np.ones(100 << 20, dtype=np.uint8)
        del block
        faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)
worker = threading.Thread(target=churn)
worker.start()
worker.join()
print([allocator.keep_freed_memory(), faults])
"""

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only")


def churn(**env: str) -> tuple[bool, list[int]]:
    """Whether the allocator was set, and the page faults of each of 5 blocks a thread takes and frees."""
    clean = {k: v for k, v in os.environ.items() if k not in ("GREBENCH_MALLOC", "GLIBC_TUNABLES")}
    out = subprocess.run([sys.executable, "-c", CHURN], cwd=ROOT, env={**clean, **env}, capture_output=True,
                         text=True, check=True).stdout
    kept, faults = ast.literal_eval(out.strip().splitlines()[-1])
    return kept, faults


def test_a_block_a_thread_freed_comes_back_without_page_faults() -> None:
    kept, faults = churn()
    assert kept
    assert faults[0] > 40                   # the first block is new memory
    assert max(faults[1:]) <= 5, faults      # the later ones reuse it


def test_grebench_malloc_system_leaves_glibcs_defaults() -> None:
    kept, faults = churn(GREBENCH_MALLOC="system")
    assert not kept
    assert min(faults[1:]) > 40, faults      # every block mmap'd and faulted in anew


def test_the_users_own_malloc_tunables_win() -> None:
    kept, _ = churn(GLIBC_TUNABLES="glibc.malloc.arena_max=2")
    assert not kept


TRIM = """
import tasks  # the first import of the project sets the allocator
from tasks.core import allocator
import numpy as np
def resident_mb():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024
block = np.ones(200 << 20, dtype=np.uint8)   # 200 MB from the heap (below the mmap threshold set)
after = np.ones(1 << 10, dtype=np.uint8)     # a small block above it keeps the heap's top in use
del block
kept = resident_mb()
given = allocator.give_back_freed_memory()
print([given, kept, resident_mb()])
"""


def test_freed_memory_is_given_back_between_stages() -> None:
    clean = {k: v for k, v in os.environ.items() if k not in ("GREBENCH_MALLOC", "GLIBC_TUNABLES")}
    out = subprocess.run([sys.executable, "-c", TRIM], cwd=ROOT, env=clean, capture_output=True, text=True,
                         check=True).stdout
    given, kept, after = ast.literal_eval(out.strip().splitlines()[-1])
    assert given and after < kept - 150, (kept, after)   # the 200 MB kept after the free, gone after the trim
