"""Peak resident memory of scoring N log-likelihood requests on CPU with the embedded SmolLM2.

Run by `bench/speed/score.py --memory N` in a fresh process (`memory_in_fresh_process` there) (so the peak belongs to scoring alone). The
requests have the score stage's shape: for each ICLR 2023 dev paper (in a seeded order) the five
candidate variants of bench/speed/score.py and the marginal prompt, each followed by every judgment line
of the paper's other reviews as its own continuation (one line each keeps the run short on CPU;
memory is bounded by the batch budget, not by the number of requests), until N unique requests.
Prints the resident set before loading, after loading and at the peak (Linux ru_maxrss).

    .venv/bin/python bench/speed/score_memory.py --requests 1000 [--token-budget 4096] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=HERE.parents[2] / "shared" / "data" / "iclr2023_dev.parquet")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--token-budget", type=int, default=4096, help="the score stage's default")
    parser.add_argument("--seed", type=int, default=2025)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.path[:0] = [str(HERE.parents[1]), str(HERE.parent)]

    import polars as pl
    from score import lines, variants

    from tasks.lm import LoglikelihoodRequest, ModelSpec, load_model
    from tasks.lm.loglikelihood import LoglikelihoodEngine
    from tasks.metrics.prompts import NOT_AVAILABLE, system_prompt, user_prompt

    before = _rss_mib()
    data = pl.read_parquet(args.data)
    rng = random.Random(args.seed)
    papers = sorted(data["paper_id"].unique().to_list())
    rng.shuffle(papers)
    system = system_prompt("judgments")
    wanted: dict[tuple[str, str], LoglikelihoodRequest] = {}
    for paper in papers:
        reviews = data.filter(pl.col("paper_id") == paper)["judgments_reference"].to_list()
        if len(reviews) < 2:
            continue
        other = data.row(rng.randrange(data.height), named=True)["judgments_reference"]
        prompts = [user_prompt("judgments", NOT_AVAILABLE, text)
                   for text in variants(reviews[0], other, rng).values()] + [user_prompt("judgments", NOT_AVAILABLE, None)]
        for reference in reviews[1:]:
            for line in lines(reference):
                for user in prompts:
                    wanted.setdefault((user, line), LoglikelihoodRequest(system, user, line))
        if len(wanted) >= args.requests:
            break
    batch = list(wanted.values())[: args.requests]
    model, tokenizer = load_model(ModelSpec())
    loaded = _rss_mib()
    engine = LoglikelihoodEngine(model, tokenizer, token_budget=args.token_budget)
    started = time.perf_counter()
    engine.score(batch)
    seconds = time.perf_counter() - started
    figures = {"requests": len(batch), "prompts": len({r.user for r in batch}), "token_budget": args.token_budget,
               "rss_before_mib": round(before), "rss_loaded_mib": round(loaded), "peak_rss_mib": round(_peak_mib()),
               "seconds": round(seconds, 1), "forward_tokens": engine.stats.forward_tokens,
               "padded_tokens": engine.stats.padded_tokens}
    print(figures, file=sys.stderr)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
