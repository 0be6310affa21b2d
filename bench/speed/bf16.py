"""Does bfloat16 change a conclusion? float32 vs bfloat16 on real ICLR 2023 reviews, embedded SmolLM2.

Two parts, each optional:

* **scores and verdicts** (`--papers N`): the metric validation of bench/validity/validate.py (one seeded
  review per paper is the candidate, the others its references, the file's GPT-4o judgments as
  judgment lines, every deterministic strategy) run twice, the evaluation LM in float32 then in
  bfloat16. Printed: GEM of every (candidate version, paper) pair (the
  mean over the paper's references, what the verdicts are computed from) under both: the largest,
  median and 90th percentile absolute difference in nats and the Spearman correlation; and each
  (metric, strategy) verdict and SMD under both, with the verdicts that differ.
* **generation** (`--generate N`): N real reviews rewritten as judgments (the preprocess prompt,
  its line prefixes and prefill) by the embedded SmolLM2 in bfloat16, through the fast decoder
  (drafted, tasks/lm/decode.py) and through transformers' own bfloat16 greedy `generate`, compared
  byte for byte; the same requests in float32 say how far bfloat16 moves the answers.

Matmuls (`--matmul`): "native" runs torch's bfloat16 kernels; "emulated" runs every bfloat16
linear layer as the pipeline does on a CPU without bf16 units (tasks/lm/wide_bf16.py): a float32 matmul
of its bfloat16 inputs, rounded back to bfloat16, which is what bf16 units do (products of bf16 numbers
are exact in float32, sums are accumulated in float32, the output is rounded once); only the order of
the float32 additions may differ. "auto" is what `load_model` does here: native on a CPU with bf16 units
(or CUDA), emulated elsewhere. Everything else (norms, attention, activations, the log-softmax in float32)
runs as it does in the pipeline.

    PYTHONPATH=. .venv/bin/python bench/speed/bf16.py --papers 20 [--generate 6] [--matmul auto|native|emulated]

The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import polars as pl  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data" / "iclr2023_dev.parquet"
PAIR = ["paper_id", "candidate", "source", "metric"]


def spearman(a: list[float], b: list[float]) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def validation_under(dtype: str, reviews: pl.DataFrame, papers: int, seed: int, token_budget: int):
    from tasks.core.config import ValidateConfig
    from tasks.lm import ModelSpec, local_lm
    from tasks.metrics import Resources
    from tasks.metrics.resources import EMBED_MODEL, engine_loglikelihood, token_embeddings
    from tasks.stages.validate.strategies import DETERMINISTIC
    from tasks.stages.validate.workflow import run_validation

    spec = ModelSpec(dtype=dtype)
    engine = local_lm(spec, token_budget).engine
    score = engine_loglikelihood(spec, token_budget)
    seen: list[pl.DataFrame] = []

    def recorded(requests: pl.DataFrame) -> pl.DataFrame:
        seen.append(score(requests))
        return seen[-1]

    resources = Resources(spec.resolved().key, recorded, token_embeddings, EMBED_MODEL)
    started, cpu = time.perf_counter(), time.process_time()
    settings = ValidateConfig(strategies=tuple(DETERMINISTIC), metrics=("gem",), max_papers=papers, candidates="one",
                              seed=seed)
    result = run_validation(reviews, settings, resources=resources)
    seconds = {"wall_s": round(time.perf_counter() - started, 1), "cpu_s": round(time.process_time() - cpu, 1),
               "requests": engine.stats.unique, "forward_tokens": engine.stats.forward_tokens}
    return result, pl.concat(seen).unique("key"), seconds


def scores_and_verdicts(args: argparse.Namespace) -> dict[str, object]:
    raw = pl.read_parquet(args.data)
    reviews = raw.select(
        "paper_id", pl.concat_str("paper_id", pl.col("reviewer").cast(pl.String), separator="/").alias("review_id"),
        pl.col("review").alias("review_text"), pl.col("judgments_reference").alias("judgments"),
    )
    f32, f32_lp, f32_cost = validation_under("float32", reviews, args.papers, args.seed, args.token_budget)
    print(f"float32: {f32_cost}", flush=True)
    bf16, bf16_lp, bf16_cost = validation_under("bfloat16", reviews, args.papers, args.seed, args.token_budget)
    print(f"bfloat16: {bf16_cost}", flush=True)
    if args.keep:     # the raw frames, for a second look without scoring again
        args.keep.mkdir(parents=True, exist_ok=True)
        for name, frame in (("scores_f32", f32.scores), ("scores_bf16", bf16.scores), ("logprobs_f32", f32_lp),
                            ("logprobs_bf16", bf16_lp), ("validation_f32", f32.validation),
                            ("validation_bf16", bf16.validation)):
            frame.write_parquet(args.keep / f"{name}.parquet")
    pairs = (f32.scores.filter(pl.col("score").is_not_nan()).select(*PAIR, f32="score")
             .join(bf16.scores.select(*PAIR, bf16="score"), on=PAIR, how="inner"))
    diff = (pairs["f32"] - pairs["bf16"]).abs()
    verdicts = (f32.validation.select("metric", "strategy", "kind", "n", smd_f32="smd", p_f32="p_value",
                                      passed_f32="passed")
                .join(bf16.validation.select("metric", "strategy", smd_bf16="smd", p_bf16="p_value",
                                             passed_bf16="passed"), on=["metric", "strategy"], how="full",
                      coalesce=True))
    for row in verdicts.iter_rows(named=True):
        print(f"{row['metric']:6s} {row['strategy']:24s} {row['kind']:12s} n={row['n']:3d} "
              f"float32 smd={row['smd_f32']:+.3f} p={row['p_f32']:.3g} passed={row['passed_f32']}  "
              f"bfloat16 smd={row['smd_bf16']:+.3f} p={row['p_bf16']:.3g} passed={row['passed_bf16']}")
    differ = verdicts.filter(pl.col("passed_f32").ne_missing(pl.col("passed_bf16")))
    figures = {
        "papers": f32.scores["paper_id"].n_unique(),
        "pairs": pairs.height,
        "loglik_requests": {"float32": f32_lp.height, "bfloat16": bf16_lp.height},   # keys differ by dtype
        "gem_abs_diff_max_nats": round(float(diff.max()), 4),
        "gem_abs_diff_median_nats": round(float(diff.median()), 4),
        "gem_abs_diff_p90_nats": round(float(diff.quantile(0.9)), 4),
        "gem_mean_abs_nats": round(float(pairs["f32"].abs().mean()), 3),
        "spearman_pair_scores": round(spearman(pairs["f32"].to_list(), pairs["bf16"].to_list()), 5),
        "verdicts": verdicts.height,
        "verdicts_that_differ": differ.select("metric", "strategy", "passed_f32", "passed_bf16").to_dicts(),
        "smd_abs_diff_max": round(float((verdicts["smd_f32"] - verdicts["smd_bf16"]).abs().max()), 4),
        "float32_cost": f32_cost,
        "bfloat16_cost": bf16_cost,
    }
    print(f"{figures['pairs']} candidate scores on {figures['papers']} papers: |GEM float32 - bfloat16| max "
          f"{figures['gem_abs_diff_max_nats']} nats, median {figures['gem_abs_diff_median_nats']}, p90 "
          f"{figures['gem_abs_diff_p90_nats']} (mean |GEM| {figures['gem_mean_abs_nats']}); Spearman "
          f"{figures['spearman_pair_scores']}; {len(figures['verdicts_that_differ'])} of {verdicts.height} verdicts differ",
          flush=True)
    return figures


def generation(args: argparse.Namespace) -> dict[str, object]:
    from tasks.core.config import PreprocessConfig
    from tasks.core.prompts import load_prompt
    from tasks.judgments.extract import LINE_PREFIXES, PREFILL, render
    from tasks.lm import ChatRequest, ModelSpec
    from tasks.lm.local import LocalLM

    cfg = PreprocessConfig(max_tokens=args.max_tokens)
    raw = pl.read_parquet(args.data).sample(args.generate, seed=args.seed)
    system = load_prompt(cfg.prompt_version)   # as the preprocess stage asks the local backend
    requests = [ChatRequest(system, render("review", text), cfg.max_tokens, f"r{i}", PREFILL["review"],
                            line_prefixes=LINE_PREFIXES["review"]) for i, text in enumerate(raw["review"])]
    answers = {}
    seconds = {}
    for dtype in ("bfloat16", "float32"):
        for decoder in ("fast", "generate"):
            if dtype == "float32" and decoder == "generate":
                continue
            lm = LocalLM(ModelSpec(dtype=dtype), batch_size=cfg.batch_size, decoder=decoder)
            started = time.perf_counter()
            answers[dtype, decoder] = [r.text for r in lm.generate(requests)]
            seconds[f"{dtype}_{decoder}_s"] = round(time.perf_counter() - started, 1)
            print(f"{dtype} {decoder}: {seconds[f'{dtype}_{decoder}_s']} s", flush=True)
    ours, theirs, f32 = answers["bfloat16", "fast"], answers["bfloat16", "generate"], answers["float32", "fast"]
    same = sum(a == b for a, b in zip(ours, theirs, strict=True))
    moved = sum(a != b for a, b in zip(ours, f32, strict=True))
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        if a != b:
            at = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
            print(f"request {i}: the decoders part at character {at}: {a[at:at + 60]!r} vs {b[at:at + 60]!r}")
    figures = {"requests": len(requests), "max_tokens": args.max_tokens,
               "bf16_fast_equals_bf16_generate": same, "bf16_differs_from_float32": moved,
               "answer_chars": sum(map(len, ours)), **seconds}
    print(f"generation: {same} of {len(requests)} bfloat16 answers byte for byte equal to transformers' bfloat16 "
          f"generate; {moved} of {len(requests)} differ from float32", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--papers", type=int, default=20, help="papers validated under both dtypes (0: skip)")
    parser.add_argument("--generate", type=int, default=0, help="reviews rewritten as judgments (0: skip)")
    parser.add_argument("--max-tokens", type=int, default=160, help="answer limit of the generation part")
    parser.add_argument("--matmul", choices=("auto", "native", "emulated"), default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--token-budget", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--keep", type=Path, default=None, help="write the scores and verdicts of both runs here")
    args = parser.parse_args()
    if not args.data.is_file():
        print(f"skipped: {args.data} is not here (the bench needs the shared ICLR 2023 dev file)")
        print(json.dumps({"skipped": True, "reason": f"{args.data} not found"}))
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.matmul == "emulated":      # also on a CPU with bf16 units: say it has none, for the bfloat16 layers
        os.environ.update({"GREBENCH_CPU_BF16": "0", "GREBENCH_BF16_MATMUL": "float32"})
    elif args.matmul == "native":
        os.environ["GREBENCH_BF16_MATMUL"] = "torch"
    from tasks.lm import wide_bf16
    from tasks.lm.cpu import cpu_has_bf16

    emulate = not torch.cuda.is_available() and wide_bf16.wanted()
    figures: dict[str, object] = {"matmul": "emulated" if emulate else "native", "bf16_units": cpu_has_bf16(),
                                  "threads": torch.get_num_threads()}
    if args.papers:
        figures["scores"] = scores_and_verdicts(args)
    if args.generate:
        figures["generation"] = generation(args)
    print(json.dumps(figures, default=lambda v: None if isinstance(v, float) and math.isnan(v) else str(v)))


if __name__ == "__main__":
    main()
