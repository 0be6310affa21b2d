"""The bf16 CPU kernels (tasks/lm/cpu_kernels.py, tasks/lm/kernels/bf16.c): built with the system's C
compiler, and, on a CPU with AVX-512 BF16 units, attention by path and the fused norm and MLP against
torch's own computation."""

from __future__ import annotations

import shutil

import pytest
import torch
from torch.nn.functional import scaled_dot_product_attention

from tasks.lm import cpu_kernels
from tasks.lm.cpu import cpu_flags
from tasks.lm.flat_attention import PLAN, _by_path, flat_mask

COMPILER = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")
UNITS = pytest.mark.skipif(cpu_kernels.UNITS not in cpu_flags() or cpu_kernels.kernel() is None,
                           reason="the kernels run only on a CPU with AVX-512 BF16 units")


@pytest.fixture
def places(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_kernels, "_places", lambda: [tmp_path / "env", tmp_path / "cache"])
    return tmp_path


@COMPILER
def test_the_library_is_built_once_and_named_by_its_source(places) -> None:
    built = cpu_kernels.build()
    assert built is not None and built.parent == places / "env" and built.stat().st_size > 0
    stamp = built.stat().st_mtime_ns
    assert cpu_kernels.build() == built and built.stat().st_mtime_ns == stamp    # not rebuilt
    assert [p.name for p in built.parent.iterdir()] == [built.name]              # no scratch left behind


def test_without_a_compiler_there_is_no_library_and_torch_keeps_the_work(places, monkeypatch) -> None:
    monkeypatch.setenv("CC", str(places / "no-such-compiler"))
    assert cpu_kernels.build() is None
    monkeypatch.setenv("GREBENCH_CPU_KERNEL", "0")
    cpu_kernels._library.cache_clear()
    try:
        assert cpu_kernels.kernel() is None
        assert cpu_kernels.fuse(torch.nn.Linear(2, 2).to(torch.bfloat16)) == 0
    finally:
        cpu_kernels._library.cache_clear()


def _flat_batch(parts: list[tuple[int, int]], past: int):
    """A flat batch's mask from (tokens, where their stretch ends) in layout order, and random bf16 states
    (9 query heads, 3 KV heads of 64)."""
    ends = [end for count, end in parts for _ in range(count)]
    mask = flat_mask(torch.tensor(ends), "paths", past=past, fold=3)
    torch.manual_seed(0)
    length = len(ends)
    states = (torch.randn(1, 9, length, 64), torch.randn(1, 3, past + length, 64) * 2, torch.randn(1, 3, past + length, 64))
    return mask, [s.to(torch.bfloat16) for s in states]


@UNITS
def test_attention_by_path_in_bf16_is_as_close_to_float32_as_torchs_bf16_attention(monkeypatch) -> None:
    # a 200-token head, a prompt with three continuations (one of a single token), a second prompt
    # with two: the kernel against float32 attention on the same bf16 inputs, beside torch's SDPA in bf16
    mask, (query, key, value) = _flat_batch([(300, 751), (150, 450), (1, 451), (300, 751), (200, 1101),
                                             (80, 1031), (70, 1101)], past=200)
    plan = getattr(mask, PLAN)
    exact = scaled_dot_product_attention(query.float(), key.float(), value.float(), attn_mask=mask,
                                         enable_gqa=True).transpose(1, 2)
    kernel = _by_path(query, key, value, plan, None).float()
    monkeypatch.setenv("GREBENCH_CPU_KERNEL", "0")
    cpu_kernels._library.cache_clear()
    try:
        torch_bf16 = _by_path(query, key, value, plan, None).float()
    finally:
        cpu_kernels._library.cache_clear()
    kernel_error, torch_error = (kernel - exact).abs(), (torch_bf16 - exact).abs()
    assert kernel_error.max() <= 1.5 * torch_error.max() and kernel_error.mean() <= 1.2 * torch_error.mean()
    assert torch_error.max() < 0.05                 # both are bf16 roundings of the same numbers


@UNITS
def test_packed_keys_kept_from_the_previous_segment_change_nothing() -> None:
    # siblings share their prompt's packed blocks; packing every path afresh gives the same bits
    mask, (query, key, value) = _flat_batch([(100, 300), (37, 137), (1, 138), (162, 300), (90, 450), (60, 450)],
                                            past=40)
    segments, keys = getattr(mask, PLAN).table
    assert segments[1:, 4].gt(0).all()              # every later segment shares a prefix with the one before
    fresh = segments.clone()
    fresh[:, 4] = 0
    kept = cpu_kernels.attend(query, key, value, segments, keys, 0.125)
    assert torch.equal(kept, cpu_kernels.attend(query, key, value, fresh, keys, 0.125))


@UNITS
def test_the_fused_norm_and_mlp_compute_what_transformers_modules_do() -> None:
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm

    torch.manual_seed(0)
    norm, mlp = LlamaRMSNorm(576, eps=1e-5), LlamaMLP(LlamaConfig(hidden_size=576, intermediate_size=1536))
    norm.weight.data.normal_()
    model = torch.nn.Sequential(norm, mlp).to(torch.bfloat16)
    hidden = (torch.randn(1, 300, 576) * 3).to(torch.bfloat16)
    own = norm(hidden), mlp(hidden)
    assert cpu_kernels.fuse(model) == 2 and cpu_kernels.fuse(model) == 0           # once
    normed, gated = norm(hidden), mlp(hidden)
    assert torch.equal(gated, own[1])                # silu rounded, then the product: torch's two roundings
    differ = normed != own[0]                        # the mean square summed in another order
    assert differ.float().mean() < 1e-3
    assert ((normed.float() - own[0].float()).abs()[differ] <= own[0].float().abs()[differ] / 64).all()   # one bf16 step
    cpu_kernels.unfuse(model)
    assert torch.equal(norm(hidden), own[0])
