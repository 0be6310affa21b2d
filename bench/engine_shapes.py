"""Torch-only helpers the engine benches share: the matmul peak, FLOP counts, GPU memory and sync,
and Llama-3.1-8B's shapes. Nothing here imports polars, DuckDB or Prefect, so `bench/speed/gpu_engine.py`
runs on a GPU machine that has only torch and transformers."""

from __future__ import annotations

import time

import torch


def matmul_peak(seconds: float = 3.0, n: int = 1024, device: str = "cpu",
                dtype: torch.dtype = torch.float32) -> tuple[float, float]:
    """Best GFLOP/s of an n x n matmul on this machine (same threads as the scoring, the scoring's
    dtype), per second of wall time and per second of CPU time (the latter holds on a shared, loaded
    machine; on a GPU it means nothing and equals the former)."""
    if device == "cuda":
        n = max(n, 8192)
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    best = best_cpu = 0.0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(4):
            torch.mm(a, b)
        sync(device)
        work = 4 * 2 * n**3 / 1e9
        best = max(best, work / (time.perf_counter() - start))
        best_cpu = max(best_cpu, work / max(time.process_time() - cpu, 1e-9))
    return (best, best) if device == "cuda" else (best, best_cpu)


def reset_gpu_peak(device: str) -> None:
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()


def gpu_peak_mib(device: str) -> float | None:
    return round(torch.cuda.max_memory_allocated() / 2**20, 1) if device == "cuda" else None


def sync(device: str) -> None:
    """Wait for queued GPU work, so wall clocks measure it."""
    if device == "cuda":
        torch.cuda.synchronize()


# Llama-3.1-8B's published configuration: what sets its speed and memory.
LLAMA_8B = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072, rope_theta=500000.0,
                rms_norm_eps=1e-5, tie_word_embeddings=False)


def flops(model, linear_tokens: int, attention_pairs: int, head_rows: int) -> float:
    """Matmul FLOPs: decoder linear layers per token, attention (QK and AV) per pair, output head per row."""
    config = model.config
    linear = sum(weights(p) for p in model.base_model.layers.parameters() if p.dim() == 2)
    width = config.num_attention_heads * getattr(config, "head_dim", config.hidden_size // config.num_attention_heads)
    head = model.get_output_embeddings().weight.numel()
    return 2 * linear * linear_tokens + 4 * width * config.num_hidden_layers * attention_pairs + 2 * head * head_rows




def weights(parameter: torch.Tensor) -> int:
    """A weight matrix's elements: a 4-bit packed one (bitsandbytes) counts its unpacked shape."""
    state = getattr(parameter, "quant_state", None)
    return state.shape.numel() if state is not None else parameter.numel()
