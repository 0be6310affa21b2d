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
