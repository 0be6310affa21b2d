"""Could log-likelihoods be scored in int8 on a CPU without bf16 units? The matmul speeds, then the error.

The float32 demo spends most of its time in the log-likelihood engine at the float32 matmul peak, so
the one large lever left on such a CPU is a faster number format. This bench measures, side by side
in one process on this CPU's threads:

* the matmul throughput of the engine's shapes (4,096 tokens x SmolLM2's 576 / 1,536 widths) in
  float32, bfloat16 and int8 (`torch._int_mm`, int32 accumulation); run it again with
  `ONEDNN_MAX_CPU_ISA=AVX2` to see an AVX2-only CPU's int8 and bfloat16;
* the engine on dev-file GEM requests (each review's judgments given another review of its paper,
  and alone) with every linear layer but the head in W8A8 (int8 weights per output channel, int8
  activations per token, so no value depends on a batchmate's scale), against the float32 engine:
  tokens/s, the largest and mean difference per sequence in nats, and the bfloat16 engine's for
  comparison; and one request scored alone against its value inside the batch.

Nothing of it is used by the pipeline: the figures (docs/engines.md) are why. The last line is JSON.

    .venv/bin/python bench/speed/int8_scoring.py [--papers 4] [--threads 2]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import polars as pl  # noqa: E402
import torch  # noqa: E402

from tasks.lm import LoglikelihoodRequest, ModelSpec, load_model  # noqa: E402
from tasks.lm.loglikelihood import LoglikelihoodEngine  # noqa: E402

DEV = Path(__file__).resolve().parents[3] / "shared" / "data" / "iclr2023_dev.parquet"
SHAPES = ((4096, 576, 1536), (4096, 1536, 576), (4096, 576, 576))


class W8A8Linear(torch.nn.Module):
    """A linear layer computed in int8: weights per output channel, activations per token."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach().float()
        scale = weight.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127
        self.register_buffer("qweight", (weight / scale).round().clamp(-127, 127).to(torch.int8).t().contiguous())
        self.register_buffer("wscale", scale.squeeze(1))
        self.bias = None if linear.bias is None else linear.bias.detach().float()
        self.out_features = linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1]).float()
        scale = x.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127
        q = (x / scale).round_().to(torch.int8)
        rows = q.shape[0]
        if rows <= 16:                      # _int_mm wants more than 16 rows
            q = torch.cat([q, q.new_zeros(17 - rows, q.shape[1])])
        y = torch._int_mm(q, self.qweight)[:rows].float() * scale * self.wscale
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], self.out_features)


def w8a8(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of the model with every linear layer but the output head in W8A8."""
    model = copy.deepcopy(model)
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear) and name != "lm_head":
                setattr(module, name, W8A8Linear(child))
    return model


def matmul_speeds(repeats: int = 10) -> dict[str, float]:
    """GFLOP/s (GOP/s for int8) per format, the best of the engine's shapes."""
    def rate(fn, flops: float) -> float:
        fn()
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        return flops * repeats / (time.perf_counter() - start) / 1e9
    out = {"float32": 0.0, "bfloat16": 0.0, "int8": 0.0}
    for m, k, n in SHAPES:
        a, b = torch.randn(m, k), torch.randn(k, n)
        ai, bi = torch.randint(-127, 127, (m, k), dtype=torch.int8), torch.randint(-127, 127, (k, n), dtype=torch.int8)
        ab, bb = a.bfloat16(), b.bfloat16()
        flops = 2 * m * k * n
        out["float32"] = max(out["float32"], rate(lambda a=a, b=b: a @ b, flops))
        out["bfloat16"] = max(out["bfloat16"], rate(lambda a=ab, b=bb: a @ b, flops))
        out["int8"] = max(out["int8"], rate(lambda a=ai, b=bi: torch._int_mm(a, b), flops))
    return {k: round(v, 1) for k, v in out.items()}


def gem_requests(papers: int) -> list[LoglikelihoodRequest]:
    data = pl.read_parquet(DEV)
    out = []
    for paper in data["paper_id"].unique(maintain_order=True).to_list()[:papers]:
        texts = [t for t in data.filter(pl.col("paper_id") == paper)["judgments_reference"].to_list() if t and t.strip()]
        for i, x in enumerate(texts):
            out += [LoglikelihoodRequest("Predict another review.", x, y) for j, y in enumerate(texts) if i != j]
            out.append(LoglikelihoodRequest("Predict another review.", "", x))
    return out


def timed(model, tokenizer, requests) -> tuple[list[float], float, int]:
    engine = LoglikelihoodEngine(model, tokenizer, token_budget=4096)
    engine.score(requests[:2])
    engine.stats.forward_tokens = 0
    start = time.perf_counter()
    values = [r.logprob for r in engine.score(requests)]
    return values, time.perf_counter() - start, engine.stats.forward_tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--papers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    figures: dict = {"threads": args.threads, "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", ""),
                     "matmul_gflops": matmul_speeds()}
    print("matmul", figures["matmul_gflops"], flush=True)
    requests = gem_requests(args.papers)
    model, tokenizer = load_model(ModelSpec(dtype="float32"))
    reference, seconds, tokens = timed(model, tokenizer, requests)
    figures["requests"] = len(requests)
    figures["float32"] = {"tokens_per_s": round(tokens / seconds, 1)}
    quantized = w8a8(model)
    bf16, _ = load_model(ModelSpec(dtype="bfloat16"))
    for name, candidate in (("w8a8", quantized), ("bfloat16", bf16)):
        values, seconds, tokens = timed(candidate, tokenizer, requests)
        diffs = [abs(a - b) for a, b in zip(reference, values, strict=True)]
        figures[name] = {"tokens_per_s": round(tokens / seconds, 1), "max_diff_nats": round(max(diffs), 3),
                         "mean_diff_nats": round(sum(diffs) / len(diffs), 3)}
        print(name, figures[name], flush=True)
    alone = LoglikelihoodEngine(quantized, tokenizer).score([requests[5]])[0].logprob
    inside = LoglikelihoodEngine(quantized, tokenizer).score(requests)[5].logprob
    figures["w8a8"]["alone_vs_batch_nats"] = round(abs(alone - inside), 4)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
