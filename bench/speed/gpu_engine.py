"""The scoring engine on a GPU machine that has only torch and transformers.

Two steps, on two machines:

    .venv/bin/python bench/speed/gpu_engine.py --export bench/out/gpu   # here: GEM requests + tokenizer
    python3 bench/speed/gpu_engine.py --requests bench/out/gpu          # on the GPU box (device tool)

`--export` writes `requests.json` (the unique GEM requests of `--papers` papers of the ICLR 2023 dev
file, built exactly as bench/speed/score.py builds them: 5 candidates per paper against the paper's other
reviews) and SmolLM2's tokenizer (`tokenizer/`, with its chat template). Nothing from the dev file is
committed: `bench/out/` is ignored.

The run builds a model of Llama-3.1-8B's shapes from its configuration with random weights (no hub is
reachable; shapes set the speed, values mean nothing) and measures, in one process on one GPU:

* the bf16 matmul peak (8192 x 8192);
* the engine (tasks/lm/loglikelihood.py) with eager decoder layers at each `--budgets` token budget,
  the padded rows and then the engine as shipped (layers compiled around flex attention) at the best
  one: scored and forward tokens per second, TFLOP/s (decoder linears, attention pairs and head rows it
  really computed), the fraction of the peak, the share of wall time the CPU was busy, peak GPU memory;
* the naive method on the first `--naive` requests (one full forward per request, full log_softmax);
* the ceiling: a plain eager forward of the decoder (no head) over full batches at the same shapes;
* precision: the bf16 engine and the bf16 naive method against a float32 naive reference on the
  first `--naive` requests (largest and mean per-sequence difference, nats);
* NF4 (bitsandbytes, when importable) beside bf16 at the best budget, eager and compiled.

The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parent)]

import torch  # noqa: E402
from engine_shapes import LLAMA_8B, flops, matmul_peak, sync  # noqa: E402


def export(out: Path, papers: int, seed: int) -> None:
    """Write the GEM requests of `papers` dev-file papers and SmolLM2's tokenizer under `out`."""
    import polars as pl
    from score import DATA, benchmark_frames

    from tasks.lm.loading import load_tokenizer
    from tasks.metrics import get
    from tasks.metrics.gem import build_requests

    candidates, references = benchmark_frames(pl.read_parquet(DATA), papers, seed)
    _, requests = build_requests(candidates, references, pl.DataFrame(schema={"paper_id": pl.String}),
                                 get(["gem"]), "smollm2")
    out.mkdir(parents=True, exist_ok=True)
    rows = [{k: r[k] for k in ("system", "user", "continuation")} for r in requests.iter_rows(named=True)]
    (out / "requests.json").write_text(json.dumps(rows))
    load_tokenizer().save_pretrained(out / "tokenizer")
    print(json.dumps({"requests": len(rows), "papers": papers, "out": str(out)}))


def llama(dtype: torch.dtype, nf4: bool = False, device: str = "cuda") -> torch.nn.Module:
    """A Llama-3.1-8B-shaped model with random weights on the GPU; `nf4`: its decoder's linear layers
    quantized to NF4 in place by bitsandbytes (the output head stays bf16, as transformers leaves it)."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(0)
    with torch.device(device):   # random weights drawn on the GPU: seconds, not minutes
        model = AutoModelForCausalLM.from_config(LlamaConfig(**LLAMA_8B), dtype=dtype).eval()
    return quantize_nf4(model, device) if nf4 else model


def quantize_nf4(model: torch.nn.Module, device: str) -> torch.nn.Module:
    """Swap every linear layer of the decoder for bitsandbytes' NF4 layer (double-quantized statistics,
    bf16 compute), quantizing the weights already on the device: no save and reload of 16 GB."""
    import bitsandbytes as bnb

    for layer in model.base_model.layers:
        for name, linear in list(layer.named_modules()):
            if not isinstance(linear, torch.nn.Linear):
                continue
            quantized = bnb.nn.Linear4bit(linear.in_features, linear.out_features, bias=linear.bias is not None,
                                          compute_dtype=torch.bfloat16, compress_statistics=True, quant_type="nf4",
                                          device="meta")
            weight = bnb.nn.Params4bit(linear.weight.data, requires_grad=False, compress_statistics=True,
                                       quant_type="nf4", module=quantized)
            quantized.weight = weight.to(device)   # quantizes here
            if linear.bias is not None:
                quantized.bias = torch.nn.Parameter(linear.bias.data, requires_grad=False)
            parent, _, leaf = name.rpartition(".")
            setattr(layer.get_submodule(parent) if parent else layer, leaf, quantized)
    return model


def time_engine(model, tokenizer, requests, budget: int, peak: float, flat: bool | None = None,
                compiled: bool | None = None) -> dict:
    """One timed pass of the engine (after a warm-up that also compiles) with its throughput and
    efficiency figures; `flat` and `compiled`: the layout and compiling (None: the engine's choice on a
    GPU, flat batches under flex attention in compiled layers)."""
    from tasks.lm.loglikelihood import LoglikelihoodEngine

    engine = LoglikelihoodEngine(model, tokenizer, token_budget=budget, flat=flat, compiled=compiled)
    for size in (8, 64):   # two shapes: the compiled attention settles on dynamic shapes before the timing
        engine.score(requests[:size])
    engine.stats.__init__()
    torch.cuda.reset_peak_memory_stats()
    sync("cuda")
    wall, cpu = time.perf_counter(), time.process_time()
    results = engine.score(requests)
    sync("cuda")
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    s = engine.stats
    work = flops(model, s.forward_tokens, s.attention_pairs, s.head_rows)
    layout = ("flat" if engine.flat else "rows") + (", compiled" if engine.flat and compiled is not False else "")
    return {"layout": layout, "budget": budget, "seconds": round(wall, 3), "scored_tokens_per_s": round(sum(r.n_tokens for r in results) / wall),
            "forward_tokens_per_s": round(s.forward_tokens / wall), "tflops": round(work / wall / 1e12, 1),
            "fraction_of_peak": round(work / wall / peak, 3), "cpu_busy": round(cpu / wall, 2),
            "padding": round(s.padded_tokens / max(s.forward_tokens, 1) - 1, 3), "batches": s.batches,
            "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1),
            "logprobs": [r.logprob for r in results]}


def profile(model, tokenizer, requests, budget: int) -> None:
    """The engine's busiest operations on the GPU and the CPU (torch.profiler), and how much of the
    wall time the GPU had a kernel running."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    from tasks.lm.loglikelihood import LoglikelihoodEngine

    engine = LoglikelihoodEngine(model, tokenizer, token_budget=budget)
    engine.score(requests[:8])
    sync("cuda")
    start = time.perf_counter()
    with profiler(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        engine.score(requests)
        sync("cuda")
    wall = time.perf_counter() - start
    events = prof.key_averages()
    busy = sum(e.self_device_time_total for e in events) / 1e6
    print(f"profile at budget {budget}: wall {wall:.2f} s, GPU kernels {busy:.2f} s ({busy / wall:.0%} of wall)")
    print(events.table(sort_by="self_device_time_total", row_limit=12, max_name_column_width=60))
    print(events.table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=60))


def naive(model, tokenizer, requests) -> tuple[list[float], float, int]:
    """(log-probabilities, seconds, tokens) of one plain forward per request."""
    from tasks.lm.loading import end_of_turn
    from tasks.lm.loglikelihood import encode_request, reference_score

    sync("cuda")
    start = time.perf_counter()
    values = [reference_score(model, tokenizer, [r])[0].logprob for r in requests]
    sync("cuda")
    eot = end_of_turn(tokenizer)
    tokens = sum(len(p) + len(t) for p, t in (encode_request(tokenizer, r, eot) for r in requests))
    return values, time.perf_counter() - start, tokens


def ceiling(model, peak: float) -> dict:
    """The decoder alone (no head) on full batches: the speed a perfect packer would reach."""
    best = {}
    with torch.inference_mode():
        for rows, length in ((64, 512), (16, 2048), (4, 4096)):
            ids = torch.randint(0, 49152, (rows, length), device="cuda")
            model.base_model(input_ids=ids)
            sync("cuda")
            start = time.perf_counter()
            for _ in range(3):
                model.base_model(input_ids=ids)
            sync("cuda")
            wall = (time.perf_counter() - start) / 3
            work = flops(model, rows * length, rows * length * (length + 1) // 2, 0)
            best[f"{rows}x{length}"] = {"tokens_per_s": round(rows * length / wall), "fraction_of_peak": round(work / wall / peak, 3)}
    return best


def differences(values: list[float], reference: list[float]) -> dict:
    gaps = [abs(a - b) for a, b in zip(values, reference, strict=True)]
    return {"max_nats": round(max(gaps), 4), "mean_nats": round(sum(gaps) / len(gaps), 4)}


def run(folder: Path, budgets: list[int], n_naive: int, nf4: bool, engine_only: bool = False,
        compiled: bool = False) -> dict:
    from transformers import AutoTokenizer

    from tasks.lm.types import LoglikelihoodRequest

    tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer")
    requests = [LoglikelihoodRequest(**r) for r in json.loads((folder / "requests.json").read_text())]
    peak, _ = matmul_peak(device="cuda", dtype=torch.bfloat16)
    print(f"{len(requests)} requests; {torch.cuda.get_device_name()}; bf16 matmul peak {peak / 1e3:.0f} TFLOP/s", flush=True)
    peak *= 1e9
    model = llama(torch.bfloat16)
    engines = []
    for budget in budgets:   # eager layers first: compiling changes the model in place
        figures = time_engine(model, tokenizer, requests, budget, peak, compiled=False)
        engines.append(figures)
        print(shown(figures), flush=True)
    eager = max(engines, key=lambda e: e["scored_tokens_per_s"])
    if eager["layout"] == "flat":   # the padded rows over a copied head KV, side by side at the same budget
        rows = time_engine(model, tokenizer, requests, eager["budget"], peak, flat=False)
        engines.append(rows)
        print(shown(rows), f"flat vs rows, largest difference: {largest_gap(eager, rows)} nats", flush=True)
    best = eager
    if eager["layout"] == "flat" and compiled:   # the engine as shipped: its layers compiled on a GPU
        start = time.perf_counter()
        try:
            best = time_engine(model, tokenizer, requests, eager["budget"], peak)
        except Exception as error:  # noqa: BLE001 - a compiler failure is a figure of this bench, not its end
            print(f"compiled layers failed: {type(error).__name__}: {str(error)[:300]}", flush=True)
            best = eager
        else:
            engines.append(best)
            print(shown(best), f"compiled vs eager, largest difference: {largest_gap(eager, best)} nats;",
                  f"{time.perf_counter() - start:.1f} s with compiling and warm-up", flush=True)
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "requests": len(requests),
           "bf16_peak_tflops": round(peak / 1e12), "best_budget": best["budget"], "best_layout": best["layout"],
           "best_fraction_of_peak": best["fraction_of_peak"], "engine": [shown(e) for e in engines]}
    if not engine_only:
        out |= versus_naive(model, tokenizer, requests[:n_naive], best, peak)
    del model
    torch.cuda.empty_cache()
    print(json.dumps(out), flush=True)   # the bf16 figures, in case NF4 runs out of time
    if nf4:
        out["nf4"] = nf4_figures(tokenizer, requests, best, peak)
    return out


def shown(figures: dict) -> dict:
    return {k: v for k, v in figures.items() if k != "logprobs"}


def largest_gap(a: dict, b: dict) -> float:
    return round(max(abs(x - y) for x, y in zip(a["logprobs"], b["logprobs"], strict=True)), 4)


def nf4_figures(tokenizer, requests, best: dict, peak: float) -> list[dict] | str:
    """The engine on the NF4 model at the best budget: eager layers, then as the best bf16 run did."""
    try:
        quantized = llama(torch.bfloat16, nf4=True)
    except ImportError as error:   # bitsandbytes missing on this machine
        return f"skipped: {error}"
    runs = [time_engine(quantized, tokenizer, requests, best["budget"], peak, compiled=False)]
    print("nf4", shown(runs[0]), flush=True)
    if "compiled" in best["layout"]:
        try:
            runs.append(time_engine(quantized, tokenizer, requests, best["budget"], peak))
            print("nf4", shown(runs[1]), flush=True)
        except Exception as error:  # noqa: BLE001 - as above
            print(f"nf4 compiled layers failed: {type(error).__name__}: {str(error)[:300]}", flush=True)
    return [shown(r) for r in runs]


def versus_naive(model, tokenizer, subset, best: dict, peak: float) -> dict:
    """The naive method's speed, the ceiling, and both engine layouts and the naive method in bf16
    against a float32 naive reference of the same requests."""
    from tasks.lm.flat_attention import compile_layers

    engine_subset = time_engine(model, tokenizer, subset, best["budget"], peak,
                                compiled="compiled" in best["layout"])["logprobs"]
    compile_layers(model, False)   # the naive method, the ceiling and the rows in eager layers
    naive_bf16, naive_s, naive_tokens = naive(model, tokenizer, subset)
    roof = ceiling(model, peak)
    print(f"naive bf16: {naive_s:.1f} s for {len(subset)} requests; ceiling {roof}", flush=True)
    rows_subset = time_engine(model, tokenizer, subset, best["budget"], peak, flat=False)["logprobs"]
    reference, _, _ = naive(llama(torch.float32), tokenizer, subset)
    torch.cuda.empty_cache()
    return {"naive_tokens_per_s": round(naive_tokens / naive_s), "ceiling": roof,
            "precision_vs_float32": {"requests": len(subset), "engine_bf16": differences(engine_subset, reference),
                                     "engine_rows_bf16": differences(rows_subset, reference),
                                     "naive_bf16": differences(naive_bf16, reference)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", type=Path, help="write requests.json and the tokenizer here (needs the dev file)")
    parser.add_argument("--papers", type=int, default=20)
    parser.add_argument("--seed", type=int, default=2025)
    parser.add_argument("--requests", type=Path, default=HERE.parent / "out" / "gpu", help="a folder --export wrote")
    parser.add_argument("--budgets", default="16384,32768", help="engine token budgets, comma-separated")
    parser.add_argument("--naive", type=int, default=64, help="requests for the naive method and the float32 reference")
    parser.add_argument("--no-nf4", action="store_true")
    parser.add_argument("--eager", action="store_true", help="eager decoder layers only (no compiled run)")
    parser.add_argument("--engine-only", action="store_true", help="the engine's layouts (and NF4) only: no naive method, ceiling or precision")
    parser.add_argument("--profile", type=int, default=0, metavar="BUDGET",
                        help="only profile the engine at this token budget (torch.profiler tables)")
    args = parser.parse_args()
    if args.export:
        export(args.export, args.papers, args.seed)
        return
    if not torch.cuda.is_available():
        print("no CUDA device here: this bench needs one")
        print(json.dumps({"skipped": "no CUDA device"}))
        return
    if not (args.requests / "requests.json").is_file():
        print(json.dumps({"skipped": f"{args.requests}/requests.json not found: run --export first"}))
        return
    if args.profile:
        from transformers import AutoTokenizer

        from tasks.lm.types import LoglikelihoodRequest

        requests = [LoglikelihoodRequest(**r) for r in json.loads((args.requests / "requests.json").read_text())]
        profile(llama(torch.bfloat16), AutoTokenizer.from_pretrained(args.requests / "tokenizer"), requests, args.profile)
        return
    budgets = [int(b) for b in args.budgets.split(",")]
    print(json.dumps(run(args.requests, budgets, args.naive, not args.no_nf4, args.engine_only, not args.eager)))


if __name__ == "__main__":
    main()
