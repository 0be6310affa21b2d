"""Scoring engine vs the naive method on real judgments (ICLR 2023 dev file), on the embedded LM.

For a few papers, 5 candidates per paper (one human review's judgments and four variants of them:
every other line dropped, lines shuffled, cut to the first 40% of lines, another paper's review)
are scored with GEM against the paper's other reviews. The same pairs are scored twice:

* engine: `tasks.lm.loglikelihood.LoglikelihoodEngine` on the unique requests (marginals deduplicated,
  prompts shared, batched, output head on scored positions only);
* naive: one full forward pass per pair and one per marginal, full-vocabulary log_softmax at every
  position, nothing reused (`reference_score` called once per sequence).

Only scoring is timed (model loading is not). Prints tokens/second for both (scored answer tokens,
counting each pair's conditional and marginal answer), the speedup, the largest per-sequence
difference in nats, and the engine's GFLOP/s against this machine's matmul peak in the dtype it ran
in (the float32 and bfloat16 peaks are both measured in the same run; also per CPU second, which
holds on a loaded machine), and the FLOP ratio naive / engine (the most the speedup can be at equal
efficiency). `--dtype both` (the default where bfloat16 is native: a CPU with bf16 units, or CUDA)
times a bfloat16 engine and a float32 engine side by side; the naive method runs in float32 and
is the reference both engines are compared with, so the bfloat16 engine's largest difference is
what bfloat16 costs in nats; the naive method also runs in bfloat16 (untimed), and its largest
difference from the same reference is what bfloat16 costs without the engine.
`--torch-bf16` (a CPU without bf16 units, where a bfloat16 model multiplies in float32: tasks/lm/wide_bf16.py)
also times the bfloat16 engine on torch's own bf16 matmul, side by side. `--unpacked` also times the engine
without packing (prompt bodies first, continuations on their copied KV: the engine before packing). The engine's token budget is the scoring stage's (pipelines.toml)
unless `--token-budget` says otherwise. The last line is JSON.

On a GPU (`--device cuda`) the same comparison runs in bfloat16 (`--dtype bfloat16`) or NF4 (`--nf4`, through
bitsandbytes), with peak GPU memory per method and the fraction of the measured bf16 matmul peak.
`--shape llama-3.1-8b` scores with a model of Llama-3.1-8B's shapes built from its configuration with
random weights (no hub is reachable; shapes are what matter for speed, the values mean nothing), fed
SmolLM2's token ids; exact comparisons use the embedded SmolLM2 (the default `--shape`).

    .venv/bin/python bench/speed/score.py [--papers 2] [--threads N] [--token-budget 4096] [--unpacked] [--torch-bf16]
        [--dtype auto|float32|bfloat16|both]
    .venv/bin/python bench/speed/score.py --device cuda [--dtype bfloat16] [--nf4] [--shape llama-3.1-8b]
    .venv/bin/python bench/speed/score.py --memory 1000 --token-budget 4096   # peak RSS only (bench/speed/score_memory.py)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
import tomllib
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import polars as pl  # noqa: E402
import torch  # noqa: E402
from engine_shapes import LLAMA_8B, flops, gpu_peak_mib, matmul_peak, reset_gpu_peak, sync  # noqa: E402, F401

from tasks.core.schema import REFERENCES  # noqa: E402
from tasks.core.schema import SCORING_CANDIDATES as CANDIDATES  # noqa: E402
from tasks.lm import LoglikelihoodRequest, ModelSpec, cpu_kernels, load_model  # noqa: E402
from tasks.lm.loading import fast_dtype  # noqa: E402
from tasks.lm.loglikelihood import LoglikelihoodEngine, reference_score  # noqa: E402
from tasks.metrics import get  # noqa: E402
from tasks.metrics.gem import build_requests  # noqa: E402

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "iclr2023_dev.parquet"


def lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def variants(text: str, other: str, rng: random.Random) -> dict[str, str]:
    base = lines(text)
    shuffled = base[:]
    rng.shuffle(shuffled)
    return {
        "human": "\n".join(base),
        "drop_half": "\n".join(base[::2]),
        "shuffle": "\n".join(shuffled),
        "truncate": "\n".join(base[: max(1, int(len(base) * 0.4))]),
        "other_paper": "\n".join(lines(other)),
    }


def benchmark_frames(data: pl.DataFrame, n_papers: int, seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    rng = random.Random(seed)
    data = data.with_columns(review_id=pl.col("paper_id") + "-" + pl.col("reviewer").cast(pl.String))
    papers = sorted(data.group_by("paper_id").len().filter(pl.col("len") >= 2)["paper_id"].to_list())
    chosen = rng.sample(papers, min(n_papers, len(papers)))
    refs = data.filter(pl.col("paper_id").is_in(chosen)).sort("paper_id", "reviewer")
    references = refs.select("paper_id", "review_id", pl.lit(None, pl.String).alias("review_text"),
                             pl.col("judgments_reference").alias("judgments"))
    candidates = []
    for paper in chosen:
        rows = refs.filter(pl.col("paper_id") == paper).rows(named=True)
        other = data.filter(pl.col("paper_id") != paper).row(rng.randrange(data.height - len(rows)), named=True)
        base = rows[0]
        for name, text in variants(base["judgments_reference"], other["judgments_reference"], rng).items():
            candidates.append({"paper_id": paper, "candidate": f"{base['review_id']}:{name}", "source": name,
                               "review_id": base["review_id"], "review_text": None, "judgments": text})
    return pl.DataFrame(candidates, schema=CANDIDATES), references.cast(dict(REFERENCES))


def bench_model(shape: str, device: str, dtype: str, nf4: bool):
    """(model, tokenizer): the embedded SmolLM2 through the LM layer's loader, or a model of
    Llama-3.1-8B's shapes with random weights (saved once to a temporary folder when NF4 needs
    bitsandbytes to quantize it on load), with SmolLM2's tokenizer (its ids fit the larger vocabulary)."""
    quantization = "nf4" if nf4 else "none"
    if shape == "smollm2":
        return load_model(ModelSpec(dtype=dtype, quantization=quantization, device=device))
    import tempfile

    from transformers import AutoModelForCausalLM, BitsAndBytesConfig, LlamaConfig

    from tasks.lm.loading import load_tokenizer

    if device != "cuda":
        raise SystemExit("--shape llama-3.1-8b needs --device cuda")
    config = LlamaConfig(**LLAMA_8B)
    torch.manual_seed(0)
    if not nf4:
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype)).to(device).eval()
        return model, load_tokenizer()
    with tempfile.TemporaryDirectory() as folder:
        AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).save_pretrained(folder)
        quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                   bnb_4bit_compute_dtype=torch.bfloat16, bnb_4bit_use_double_quant=True)
        model = AutoModelForCausalLM.from_pretrained(folder, quantization_config=quant, device_map=device)
    return model.eval(), load_tokenizer()


def time_engine(model, tokenizer, by_key: dict, keys: list[str], token_budget: int, device: str,
                packed: bool = True) -> tuple[LoglikelihoodEngine, list, float, float]:
    """(engine, results in `keys` order, wall seconds, CPU seconds) of one engine on the requests."""
    engine = LoglikelihoodEngine(model, tokenizer, token_budget=token_budget, packed=packed)
    engine.score([next(iter(by_key.values()))])                 # warm-up, not timed
    engine.stats.__init__()
    reset_gpu_peak(device)
    wall, cpu = time.perf_counter(), time.process_time()
    results = engine.score([by_key[k] for k in keys])
    sync(device)
    return engine, results, time.perf_counter() - wall, time.process_time() - cpu


def memory_in_fresh_process(data: Path, requests: int, token_budget: int, seed: int,
                            threads: int | None = None) -> dict:
    """Run bench/speed/score_memory.py in a fresh process (the peak belongs to scoring alone); its figures."""
    extra = ["--threads", str(threads)] if threads else []
    out = subprocess.run([sys.executable, str(Path(__file__).with_name("score_memory.py")), "--data", str(data),
                          "--requests", str(requests), "--token-budget", str(token_budget), "--seed", str(seed),
                          *extra], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def scoring_budget() -> int:
    """The token budget the scoring stage runs its engine with (pipelines.toml [score])."""
    with open(Path(__file__).resolve().parents[2] / "pipelines.toml", "rb") as config:
        return tomllib.load(config)["score"]["token_budget"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--papers", type=int, default=2, help="papers in the benchmark (5 candidates each)")
    parser.add_argument("--seed", type=int, default=2025)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--token-budget", type=int, default=scoring_budget(),
                        help="engine batch budget (padded tokens); default: the scoring stage's, pipelines.toml "
                             "[score] token_budget")
    parser.add_argument("--unpacked", action="store_true", help="also time the engine without packing")
    parser.add_argument("--torch-bf16", action="store_true",
                        help="without bf16 units: also time the bfloat16 engine on torch's own bf16 matmul")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "both"), default="auto",
                        help="the engine's dtype(s); both: bfloat16 and float32 engines side by side; "
                             "auto: both where bfloat16 is native (bf16 units, CUDA), else float32")
    parser.add_argument("--nf4", action="store_true", help="4-bit NF4 weights through bitsandbytes (CUDA)")
    parser.add_argument("--shape", choices=("smollm2", "llama-3.1-8b"), default="smollm2")
    parser.add_argument("--memory", type=int, default=0, metavar="N",
                        help="only measure peak RSS of scoring N requests (a fresh process, see memory.py)")
    args = parser.parse_args()
    if args.memory:
        figures = memory_in_fresh_process(args.data, args.memory, args.token_budget, args.seed, args.threads)
        print(json.dumps(figures))
        return
    if not args.data.is_file():
        print(f"{args.data} not found: nothing to benchmark")
        print(json.dumps({"skipped": f"{args.data} not found", "speedup": None}))
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here: the GPU mode needs one")
        print(json.dumps({"skipped": "no CUDA device", "speedup": None}))
        return
    device = args.device
    native_bf16 = fast_dtype(device) == "bfloat16"
    if args.dtype == "auto":
        dtypes = ["bfloat16", "float32"] if native_bf16 else ["float32"]
    else:
        dtypes = ["bfloat16", "float32"] if args.dtype == "both" else [args.dtype]
    if args.nf4:
        dtypes = ["bfloat16"]                  # NF4 computes in bfloat16
    candidates, references = benchmark_frames(pl.read_parquet(args.data), args.papers, args.seed)
    pairs, requests = build_requests(candidates, references, pl.DataFrame(schema={"paper_id": pl.String}),
                                     get(["gem"]), "smollm2")
    by_key = {r["key"]: LoglikelihoodRequest(r["system"], r["user"], r["continuation"]) for r in requests.iter_rows(named=True)}
    keys = list(by_key)
    # both matmul peaks in this run, on this machine's threads: each engine against its own dtype's
    peaks = {name: matmul_peak(device=device, dtype=getattr(torch, name)) for name in ("float32", "bfloat16")}
    # without bf16 units, load_model gives a bfloat16 model float32 matmuls (tasks/lm/wide_bf16.py): its peak is float32's
    from tasks.lm import wide_bf16

    wide = device == "cpu" and args.shape == "smollm2" and wide_bf16.wanted()
    if wide:
        peaks["bfloat16"] = peaks["float32"]
    print(f"{pairs.height} pairs ({candidates.height} candidates, {references.height} reviews), "
          f"{requests.height} unique requests, torch threads {torch.get_num_threads()}; matmul peaks "
          + ", ".join(f"{name} {peak:.1f} GFLOP/s ({cpu:.1f} per CPU s)" for name, (peak, cpu) in peaks.items()))

    engines: dict[str, dict] = {}
    gpu_memory = {}
    model = tokenizer = None
    for dtype in dtypes:
        model, tokenizer = bench_model(args.shape, device, dtype, args.nf4)
        engine, results, wall, cpu = time_engine(model, tokenizer, by_key, keys, args.token_budget, device)
        gpu_memory[f"engine_{dtype}"] = gpu_peak_mib(device)
        engines[dtype] = {"engine": engine, "model": model, "wall": wall, "cpu": cpu,
                          "logprob": {k: r.logprob for k, r in zip(keys, results, strict=True)},
                          "n_tokens": {k: r.n_tokens for k, r in zip(keys, results, strict=True)}}
        print(f"engine {dtype}: {wall:.1f} s wall, {cpu:.1f} s cpu; {engine.stats}", flush=True)
    torch_bf16 = None
    if args.torch_bf16 and wide and "bfloat16" in engines:   # the same bfloat16 engine on torch's own bf16 matmul
        wide_bf16.narrow(engines["bfloat16"]["model"])
        _, _, torch_wall, torch_cpu = time_engine(engines["bfloat16"]["model"], tokenizer, by_key, keys,
                                                  args.token_budget, device)
        wide_bf16.widen(engines["bfloat16"]["model"])
        torch_bf16 = {"wall_s": round(torch_wall, 1), "cpu_s": round(torch_cpu, 1),
                      "float32_matmul_speedup": round(torch_wall / engines["bfloat16"]["wall"], 2)}
        print(f"engine bfloat16 on torch's bf16 matmul: {torch_wall:.1f} s wall, {torch_cpu:.1f} s cpu", flush=True)
    unpacked_wall = unpacked_cpu = None
    if args.unpacked:    # the engine as it was before packing: bodies first, then continuations on their KV
        other, _, unpacked_wall, unpacked_cpu = time_engine(model, tokenizer, by_key, keys, args.token_budget, device,
                                                            packed=False)
        print(f"engine (unpacked, {dtypes[-1]}): {unpacked_wall:.1f} s wall, {unpacked_cpu:.1f} s cpu; {other.stats}")

    # the naive method in the last dtype (float32 when it is there): the reference every engine is compared with
    naive_dtype = dtypes[-1]
    first = engines[naive_dtype]
    n_tokens = first["n_tokens"]
    naive_lp: list[tuple[str, float]] = []
    naive_tokens = naive_rows = naive_pairs = 0
    reset_gpu_peak(device)
    wall, cpu = time.perf_counter(), time.process_time()
    for pair in pairs.iter_rows(named=True):
        for key in (pair["cond_key"], pair["marg_key"]):
            (result,) = reference_score(first["model"], tokenizer, [by_key[key]])
            naive_lp.append((key, result.logprob))
    sync(device)
    naive_wall, naive_cpu = time.perf_counter() - wall, time.process_time() - cpu
    gpu_memory["naive"] = gpu_peak_mib(device)
    for key, _ in naive_lp:                                      # work counters, outside the timing
        length = len(first["engine"].encode(by_key[key])[0]) + n_tokens[key]
        naive_tokens, naive_rows, naive_pairs = naive_tokens + length, naive_rows + length, naive_pairs + length * (length + 1) // 2
    print(f"naive ({naive_dtype}): {naive_wall:.1f} s wall, {naive_cpu:.1f} s cpu; {len(naive_lp)} forward passes, "
          f"{naive_tokens} tokens")

    scored = sum(n_tokens[pair["cond_key"]] + n_tokens[pair["marg_key"]] for pair in pairs.iter_rows(named=True))
    naive_flops = flops(first["model"], naive_tokens, naive_pairs, naive_rows)
    naive_peak, naive_peak_cpu = peaks[naive_dtype]
    figures: dict[str, object] = {
        "papers": candidates["paper_id"].n_unique(),
        "pairs": pairs.height,
        "unique_requests": requests.height,
        "scored_tokens": scored,
        "threads": torch.get_num_threads(),
        "device": device,
        "dtypes": ["nf4"] if args.nf4 else dtypes,
        "bf16_native": native_bf16,
        "bf16_matmul": "float32 (no bf16 units: tasks/lm/wide_bf16.py)" if wide else "native",
        "bfloat16_engine_on_torch_bf16_matmul": torch_bf16,
        "shape": args.shape,
        "naive_dtype": naive_dtype,
        "naive_tokens_per_s": round(scored / naive_wall, 1),
        "naive_gflops": round(naive_flops / naive_wall / 1e9, 1),
        "naive_fraction_of_peak": round(naive_flops / naive_wall / 1e9 / naive_peak, 3),
        "naive_fraction_of_peak_cpu_time": round(naive_flops / naive_cpu / 1e9 / naive_peak_cpu, 3),
        "naive_forward_tokens": naive_tokens,
        "matmul_peak_gflops": {name: round(peak, 1) for name, (peak, _) in peaks.items()},
        "matmul_peak_gflops_per_cpu_s": {name: round(cpu, 1) for name, (_, cpu) in peaks.items()},
    }
    for dtype, run in engines.items():
        stats = run["engine"].stats
        work = flops(run["model"], stats.forward_tokens, stats.attention_pairs, stats.head_rows)
        peak, peak_cpu = peaks[dtype]
        gaps = [abs(lp - run["logprob"][key]) for key, lp in naive_lp]
        worst = max(gaps)
        figures[dtype] = {
            "engine_tokens_per_s": round(scored / run["wall"], 1),
            "speedup_over_naive": round(naive_wall / run["wall"], 2),
            "speedup_over_naive_cpu_time": round(naive_cpu / run["cpu"], 2),
            "max_abs_diff_nats_vs_naive": worst,
            "mean_abs_diff_nats_vs_naive": sum(gaps) / len(gaps),
            "engine_gflops": round(work / run["wall"] / 1e9, 1),
            "engine_fraction_of_peak": round(work / run["wall"] / 1e9 / peak, 3),
            "engine_gflops_per_cpu_s": round(work / run["cpu"] / 1e9, 1),
            "engine_fraction_of_peak_cpu_time": round(work / run["cpu"] / 1e9 / peak_cpu, 3),
            "engine_forward_tokens": stats.forward_tokens,
            "naive_over_engine_flops": round(naive_flops / work, 2),
        }
        print(f"engine {dtype}: {figures[dtype]['engine_tokens_per_s']} scored tokens/s vs naive "
              f"{figures['naive_tokens_per_s']} ({naive_dtype}) -> {figures[dtype]['speedup_over_naive']}x; "
              f"largest difference from the naive {naive_dtype} {worst:.2e} nats; "
              f"{figures[dtype]['engine_gflops']} GFLOP/s = {100 * figures[dtype]['engine_fraction_of_peak']:.0f}% of "
              f"the {dtype} matmul peak {peak:.1f} ({100 * figures[dtype]['engine_fraction_of_peak_cpu_time']:.0f}% per "
              "CPU second)")
    if len(engines) == 2:
        # the naive method in bfloat16 too, against the same float32 reference: the engine's bf16 path
        # must lose no more than the plain one does
        bf16_model = engines["bfloat16"]["model"]
        cpu_kernels.unfuse(bf16_model)        # transformers' own modules: the plain bf16 computation
        # (the largest of ~100 bf16 errors is a noisy figure: the mean is printed beside it)
        naive_gaps = [abs(lp - reference_score(bf16_model, tokenizer, [by_key[key]])[0].logprob) for key, lp in naive_lp]
        worst_naive, mean_naive = max(naive_gaps), sum(naive_gaps) / len(naive_gaps)
        figures["naive_bfloat16_max_abs_diff_nats_vs_naive_float32"] = worst_naive
        figures["naive_bfloat16_mean_abs_diff_nats_vs_naive_float32"] = mean_naive
        figures["engine_bf16_no_worse_than_naive_bf16"] = figures["bfloat16"]["max_abs_diff_nats_vs_naive"] <= worst_naive
        figures["engine_bf16_mean_no_worse_than_naive_bf16"] = figures["bfloat16"]["mean_abs_diff_nats_vs_naive"] <= mean_naive
        print(f"naive bfloat16: difference from the naive float32 largest {worst_naive:.3f}, mean {mean_naive:.3f} nats; "
              f"engine bfloat16 largest {figures['bfloat16']['max_abs_diff_nats_vs_naive']:.3f}, mean "
              f"{figures['bfloat16']['mean_abs_diff_nats_vs_naive']:.3f}")
        figures["bfloat16_over_float32_engine"] = round(engines["float32"]["wall"] / engines["bfloat16"]["wall"], 2)
        figures["bfloat16_over_float32_engine_cpu_time"] = round(engines["float32"]["cpu"] / engines["bfloat16"]["cpu"], 2)
    if device == "cuda":
        figures["peak_gpu_memory_mib"] = gpu_memory
        figures["gpu"] = torch.cuda.get_device_name()
    if unpacked_wall is not None:
        last = engines[dtypes[-1]]
        figures["unpacked_tokens_per_s"] = round(scored / unpacked_wall, 1)
        figures["packed_vs_unpacked"] = round(unpacked_wall / last["wall"], 2)
        figures["packed_vs_unpacked_cpu_time"] = round(unpacked_cpu / last["cpu"], 2)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
