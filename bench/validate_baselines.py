"""Throughput of the validation building blocks on the shared ICLR 2023 dev file.

For the first N papers, reviewer 1's review is the candidate and reviewer 2's the reference; the
candidate is also perturbed by each deterministic strategy. Prints timings and the mean baseline
scores of original vs perturbed candidates, with the paired SMD; the last line is JSON.

    .venv/bin/python bench/validate_baselines.py [--papers 40] [--data ../shared/data/iclr2023_dev.parquet]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import polars as pl

from tasks.lm import embedder, load_model
from tasks.metrics.classic import bertscore, bleu, rouge_l
from tasks.metrics.resources import token_embeddings
from tasks.stages.validate.stats import paired_test
from tasks.stages.validate.strategies import DETERMINISTIC, STRATEGIES, perturb_texts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--papers", type=int, default=40)
    parser.add_argument("--data", type=Path, default=Path("../shared/data/iclr2023_dev.parquet"))
    args = parser.parse_args()

    frame = pl.read_parquet(args.data).sort("paper_id", "reviewer")
    pairs = frame.group_by("paper_id", maintain_order=True).agg(pl.col("review")).head(args.papers)
    candidates = [r[0] for r in pairs["review"].to_list()]
    references = [r[1] for r in pairs["review"].to_list()]
    paper_ids = pairs["paper_id"].to_list()

    figures: dict[str, object] = {"papers": len(candidates)}
    t0 = time.perf_counter()
    load_model(embedder().spec)
    figures["minilm_load_s"] = round(time.perf_counter() - t0, 2)

    perturbed: dict[str, list[str | None]] = {}
    t0 = time.perf_counter()
    for name in DETERMINISTIC:
        perturbed[name], _ = perturb_texts(name, candidates, paper_ids=paper_ids, seed=0)
    figures["perturb_s"] = round(time.perf_counter() - t0, 3)

    rows = []
    baselines = {"bleu": bleu, "rouge_l": rouge_l,
                 "bertscore": lambda c, r: bertscore(c, r, token_embeddings)}
    for metric, fn in baselines.items():
        t0 = time.perf_counter()
        original = fn(candidates, references)
        figures[f"{metric}_pairs_per_s"] = round(len(candidates) / (time.perf_counter() - t0), 1)
        for name, texts in perturbed.items():
            after = fn(texts, references)
            test = paired_test(original, after, STRATEGIES[name].kind)
            rows.append({"metric": metric, "strategy": name, "smd": round(test.smd, 3),
                         "p": float(f"{test.p_value:.3g}"), "passed": test.passed})
            print(f"{metric:10s} {name:24s} smd={test.smd:+.3f} [{test.ci_low:+.3f}, {test.ci_high:+.3f}] "
                  f"p={test.p_value:.3g} passed={test.passed}")
    figures["validation"] = rows
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
