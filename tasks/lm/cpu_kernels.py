"""The bfloat16 kernels of tasks/lm/kernels/bf16.c: built once with the system's C compiler, loaded with
ctypes, called on torch tensors. Attention of a flat batch by path (`kernel`), and the decoder's RMS norm
and gated SiLU (`fuse`), where torch takes five to eight passes over memory for what is one.

Only where they are the fastest: a CPU with AVX-512 BF16 units, bfloat16 tensors, head sizes that are a
multiple of 64. Anywhere else, or without a C compiler, `kernel()` is None, `fuse` changes nothing, and
the engine keeps torch's SDPA and modules (docs/engines.md). `GREBENCH_CPU_KERNEL=0` turns them off (for
side-by-side benches). The library is built into the environment's share/grebench/kernels (`.ci/install`
does it once) or, where that is not writable, the user's cache, named by a hash of the source and the
flags so that an edit rebuilds it. Only the standard library, torch and tasks.lm.cpu are imported
(the engine runs on a bare GPU machine).
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

from tasks.lm.cpu import cpu_flags

SOURCE = Path(__file__).with_name("kernels") / "bf16.c"
FLAGS = ["-O3", "-std=c11", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512bf16", "-mfma", "-fopenmp",
         "-shared", "-fPIC"]
UNITS = "avx512_bf16"     # the /proc/cpuinfo flag the kernel needs


class KernelError(RuntimeError):
    """The kernel refused a call (shapes it does not take, memory)."""


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
        target = place / f"bf16-{digest}.so"
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
    if os.environ.get("GREBENCH_CPU_KERNEL", "1") == "0" or UNITS not in cpu_flags():
        return None
    path = build()
    if path is None:
        return None
    library = ctypes.CDLL(str(path))
    pointer, number, long, real = ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_float
    for name, arguments in (
            ("grebench_attention_paths", [pointer, long, long, pointer, long, long, pointer, long, long, pointer, long,
                                          long, number, number, number, number, pointer, pointer, number, real, number]),
            ("grebench_rms_norm_bf16", [pointer, pointer, pointer, long, number, real, number]),
            ("grebench_silu_mul_bf16", [pointer, pointer, pointer, long, number])):
        function = getattr(library, name)
        function.argtypes = arguments
        function.restype = number if name == "grebench_attention_paths" else None
    return library


def takes(dim: int) -> bool:
    """Whether the kernel takes heads of size `dim`."""
    return dim % 64 == 0 and dim <= 256


def kernel():
    """`attend` where the kernel runs on this machine, else None."""
    return attend if _library() is not None else None


def attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, segments: torch.Tensor, keys: torch.Tensor,
           scale: float) -> torch.Tensor:
    """Attention of a flat batch, bf16 `query` (1, heads, L, dim) on `key` and `value` (1, kv_heads, past + L,
    dim), segment by segment: `segments` (S, 5) int32 rows of (start, length, offset, count, shared), each
    the queries start .. start + length - 1 on the path keys[offset : offset + count] (int32 rows of the
    keys, in path order, ending with the segment itself), its first `shared` keys the previous segment's.
    In transformers' layout (1, L, heads, dim), bf16; dim a multiple of 64 up to 256."""
    function = _library().grebench_attention_paths
    if not len(segments):
        raise KernelError("a flat batch without segments")
    query, key, value = (t if t.stride(-1) == 1 else t.contiguous() for t in (query, key, value))
    _, heads, length, dim = query.shape
    out = torch.empty((1, length, heads, dim), dtype=query.dtype)
    longest = int(segments[:, 3].max())
    code = function(query.data_ptr(), query.stride(1), query.stride(2), key.data_ptr(), key.stride(1), key.stride(2),
                    value.data_ptr(), value.stride(1), value.stride(2), out.data_ptr(), out.stride(2), out.stride(1),
                    heads, key.shape[1], dim, len(segments), segments.data_ptr(), keys.data_ptr(), longest, scale,
                    torch.get_num_threads())
    if code != 0:
        raise KernelError(f"the bf16 attention kernel refused query {tuple(query.shape)}, key {tuple(key.shape)} "
                          f"(code {code})")
    return out


def rms_norm(module: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """A LlamaRMSNorm's forward (bf16 in and out, bf16 weight) in one pass."""
    if hidden.dtype != torch.bfloat16 or hidden.shape[-1] % 16:
        return type(module).forward(module, hidden)
    hidden = hidden.contiguous()
    out = torch.empty_like(hidden)
    _library().grebench_rms_norm_bf16(hidden.data_ptr(), module.weight.data_ptr(), out.data_ptr(),
                                      hidden.numel() // hidden.shape[-1], hidden.shape[-1], module.variance_epsilon,
                                      torch.get_num_threads())
    return out


def gated_mlp(module: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """A gated SiLU MLP's forward (LlamaMLP's), the activation and product in one pass."""
    gate, up = module.gate_proj(hidden), module.up_proj(hidden)
    if gate.dtype != torch.bfloat16 or gate.numel() % 16:
        return module.down_proj(module.act_fn(gate) * up)
    gate, up = gate.contiguous(), up.contiguous()
    _library().grebench_silu_mul_bf16(gate.data_ptr(), up.data_ptr(), gate.data_ptr(), gate.numel(),
                                      torch.get_num_threads())
    return module.down_proj(gate)


def _is_silu(activation) -> bool:
    """torch's SiLU module or transformers' (SiLUActivation, what ACT2FN["silu"] gives)."""
    return isinstance(activation, torch.nn.SiLU) or type(activation).__name__ == "SiLUActivation"


def fuse(model: torch.nn.Module) -> int:
    """Give a bf16 CPU model's RMS norms and gated SiLU MLPs the one-pass kernels (their own forward is
    kept for anything else); how many modules now use them (0 where the kernels do not run here).
    `load_model` does it on load, so that generation and scoring compute the same way whatever ran first."""
    weight = next(model.parameters(), None)
    if _library() is None or weight is None or weight.dtype != torch.bfloat16 or weight.device.type != "cpu":
        return 0
    fused = 0
    for module in model.modules():
        if "forward" in vars(module):
            continue                               # fused already (or patched by someone else)
        if type(module).__name__.endswith("RMSNorm") and hasattr(module, "variance_epsilon") \
                and module.weight.dtype == torch.bfloat16:
            module.forward = functools.partial(rms_norm, module)
            fused += 1
        elif all(hasattr(module, name) for name in ("gate_proj", "up_proj", "down_proj")) \
                and _is_silu(getattr(module, "act_fn", None)):
            module.forward = functools.partial(gated_mlp, module)
            fused += 1
    return fused


def unfuse(model: torch.nn.Module) -> None:
    """Undo `fuse`: every module's own forward again (the plain computation benches compare with)."""
    for module in patched(model, (rms_norm, gated_mlp)):
        del module.forward


def patched(model: torch.nn.Module, functions: tuple) -> list[torch.nn.Module]:
    """The modules of `model` whose forward is one of `functions` bound to the module (`fuse`, and
    tasks/lm/wide_bf16.py's `widen`)."""
    return [module for module in model.modules()
            if isinstance(forward := vars(module).get("forward"), functools.partial) and forward.func in functions]
