"""bfloat16 linear layers on a CPU without bf16 units, computed the way bf16 units compute them, at float32's speed.

A bf16 unit multiplies bfloat16 numbers exactly (an 8-bit by 8-bit significand product fits in float32's
24 bits), adds the products in float32 and rounds the result to bfloat16 once. Where a CPU has no such units
(AVX2-only x86), torch's bfloat16 matmul is an emulation 3x (the engine's batches on an AVX-512 host held to
AVX2) to 24x (one matmul on a real AVX2-only EPYC) slower than its float32 one (docs/bfloat16.md). `widen(model)` gives each bfloat16
`nn.Linear` of a CPU model a float32 copy of its weight (and bias) and a forward that runs one float32 matmul
of the bfloat16 input, rounded back to bfloat16: the products and the sums are those of bf16 units, only the
order of the float32 additions may differ (as between thread counts). The bfloat16 weight stays the module's
parameter (a tied embedding stays tied; the engine's float32 target logit reads it), so the layer costs its
weight once more in float32 (SmolLM2-135M: 0.54 GiB).

`load_model` widens a bfloat16 CPU model where `tasks.lm.cpu.cpu_has_bf16` says the CPU has no bf16 units
(`GREBENCH_CPU_BF16` = 0 says so too) and `GREBENCH_BF16_MATMUL` is not "torch" (torch's own bf16 matmul, for
benches that compare the two). The evaluation LM's key stays its bfloat16 key: the numbers are bfloat16's.
"""

from __future__ import annotations

import functools
import os

import torch

from tasks.lm.cpu import cpu_has_bf16
from tasks.lm.cpu_kernels import patched

MATMUL_ENV = "GREBENCH_BF16_MATMUL"      # "float32" (the default without bf16 units) | "torch"


def wanted() -> bool:
    """Whether a bfloat16 CPU model loaded now is widened: no bf16 units here, and not asked for torch's matmul."""
    told = os.environ.get(MATMUL_ENV, "").strip() or "float32"
    if told not in ("float32", "torch"):
        raise ValueError(f"{MATMUL_ENV} must be float32 or torch, not {told!r}")
    return told == "float32" and not cpu_has_bf16()


def wide_linear(module: torch.nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
    """`module`'s forward as bf16 units compute it: a float32 matmul of the bfloat16 values, rounded once."""
    return torch.nn.functional.linear(hidden.float(), module.wide_weight, module.wide_bias).to(torch.bfloat16)


def widen(model: torch.nn.Module) -> int:
    """Give every bfloat16 `nn.Linear` of a CPU `model` the float32 forward of the module docstring; how many
    layers now use it (0 for a model in another dtype or on another device, or widened already)."""
    widened = 0
    for module in model.modules():
        if type(module) is not torch.nn.Linear or "forward" in vars(module):
            continue                               # another layer type, or widened (or patched) already
        if module.weight.dtype != torch.bfloat16 or module.weight.device.type != "cpu":
            continue
        module.register_buffer("wide_weight", module.weight.detach().float(), persistent=False)
        module.register_buffer("wide_bias", None if module.bias is None else module.bias.detach().float(),
                               persistent=False)
        module.forward = functools.partial(wide_linear, module)
        widened += 1
    return widened


def narrow(model: torch.nn.Module) -> None:
    """Undo `widen`: torch's own bfloat16 matmul again, the float32 copies dropped."""
    for module in patched(model, (wide_linear,)):
        del module.forward, module.wide_weight, module.wide_bias
