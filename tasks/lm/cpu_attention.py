"""The bfloat16 attention kernel of tasks/lm/kernels/attention_bf16.c: built once with the system's C
compiler, loaded with ctypes, called on torch tensors.

Only where it is the fastest: a CPU with AVX-512 BF16 units, bfloat16 tensors, head sizes that are a
multiple of 64. Anywhere else, or without a C compiler, `kernel()` is None and the engine keeps torch's
SDPA (docs/engines.md). `GREBENCH_CPU_KERNEL=0` turns it off (for side-by-side benches). The library is
built into the environment's share/grebench/kernels (`.ci/install` does it once) or, where that is not
writable, the user's cache, named by a hash of the source and the flags so that an edit rebuilds it.
Only the standard library and torch are imported (the engine runs on a bare GPU machine).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("kernels") / "attention_bf16.c"
FLAGS = ["-O3", "-std=c11", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512bf16", "-mfma", "-fopenmp",
         "-shared", "-fPIC"]
UNITS = "avx512_bf16"     # the /proc/cpuinfo flag the kernel needs


class KernelError(RuntimeError):
    """The kernel refused a call (shapes it does not take, memory)."""


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def _places() -> list[Path]:
    return [Path(sys.prefix) / "share" / "grebench" / "kernels",
            Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "grebench" / "kernels"]


def build() -> Path | None:
    """The compiled library (built now if missing), or None without a C compiler or a writable place."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join(FLAGS).encode()).hexdigest()[:16]
    for place in _places():
        target = place / f"attention_bf16-{digest}.so"
        if target.exists():
            return target
        try:
            place.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=place) as scratch:
                built = Path(scratch) / target.name
                subprocess.run([compiler, *FLAGS, str(SOURCE), "-o", str(built)], check=True, capture_output=True)
                built.replace(target)      # atomic: a concurrent build never leaves half a file
            return target
        except (OSError, subprocess.CalledProcessError):
            continue
    return None


@functools.cache
def _library():
    if os.environ.get("GREBENCH_CPU_KERNEL", "1") == "0" or UNITS not in _cpu_flags():
        return None
    path = build()
    if path is None:
        return None
    library = ctypes.CDLL(str(path))
    function = library.grebench_attention_bf16
    pointer, number = ctypes.c_void_p, ctypes.c_int
    function.argtypes = [pointer, pointer, pointer, pointer, pointer, number, number, number, number, number,
                         ctypes.c_float, number]
    function.restype = number
    return function


def kernel():
    """`attend` where the kernel runs on this machine, else None."""
    return attend if _library() is not None else None


def attend(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, count: torch.Tensor,
           scale: float) -> torch.Tensor:
    """Attention of bf16 `queries` (pieces, kv_heads, rows, dim) on `keys` and `values` (pieces,
    kv_heads, width, dim), each row on the first `count[piece, row]` keys of its piece; (pieces,
    kv_heads, rows, dim) in bf16. dim and width multiples of 64, every count in 1 .. width."""
    function = _library()
    queries, keys, values = (t.contiguous() for t in (queries, keys, values))
    count = count.to(torch.int32).contiguous()
    pieces, kv_heads, rows, dim = queries.shape
    width = keys.shape[2]
    out = torch.empty_like(queries)
    code = function(queries.data_ptr(), keys.data_ptr(), values.data_ptr(), count.data_ptr(), out.data_ptr(),
                    pieces, kv_heads, rows, width, dim, scale, torch.get_num_threads())
    if code != 0:
        raise KernelError(f"the bf16 attention kernel refused {tuple(queries.shape)} on width {width} (code {code})")
    return out
