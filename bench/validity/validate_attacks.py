"""The validation workflow under every deterministic strategy and the adversary, on the shared ICLR 2023 dev file.

One seeded candidate review per paper, the paper's other reviews as references (the workflow's
own sample). The file's `judgments_reference` column is the judgments of each review, so judgment
metrics run at the judgment level. Prints the validation table, the length-confound table, the
adversary's largest inflation per metric and wall times; the last line is JSON.

    .venv/bin/python bench/validity/validate_attacks.py [--papers 60] [--metrics bleu,rouge_l] [--adversary-steps 4]
        [--level judgments|raw] [--max-tokens 160] [--cache data/cache/llm]

`--level raw` perturbs the raw review and preprocesses the result with the embedded SmolLM2 (the
[preprocess] defaults; answers cached under `--cache`); the judgment metrics then read those lines.
"""

from __future__ import annotations

import argparse
import json
import time

import polars as pl
from dev_file import add_options, load_reviews, raw_level

from tasks.core.config import ValidateConfig
from tasks.metrics import Resources
from tasks.stages.validate.strategies import DETERMINISTIC
from tasks.stages.validate.workflow import run_validation


def main() -> None:
    parser = argparse.ArgumentParser()
    add_options(parser)
    parser.add_argument("--metrics", default="bleu,rouge_l")
    parser.add_argument("--adversary-steps", type=int, default=4)
    args = parser.parse_args()

    reviews = load_reviews(args.data)
    metrics = [m for m in args.metrics.split(",") if m]
    from tasks.metrics import get
    from tasks.metrics.resources import EMBED_MODEL, engine_loglikelihood, token_embeddings

    resources = Resources(embed=token_embeddings, embed_model=EMBED_MODEL)
    if any(m.needs.name == "lm_logprobs" for m in get(metrics)):   # the embedded evaluation LM
        from tasks.lm import ModelSpec

        spec = ModelSpec()
        resources = Resources(spec.resolved().key, engine_loglikelihood(spec, args.token_budget), token_embeddings,
                              EMBED_MODEL)
    strategies = [*DETERMINISTIC, *(["adversary"] if args.adversary_steps else [])]
    preprocess = None
    if args.level == "raw":
        reviews, preprocess = raw_level(reviews, args.max_tokens, args.cache)
    t0 = time.perf_counter()
    result = run_validation(reviews, ValidateConfig(strategies=strategies, metrics=metrics, max_papers=args.papers, min_pairs=args.min_pairs, adversary_steps=args.adversary_steps, level=(args.level,)), resources=resources, preprocess=preprocess)
    wall = time.perf_counter() - t0
    with pl.Config(tbl_rows=200, tbl_cols=20, tbl_width_chars=200, fmt_str_lengths=40):
        print(result.validation.select("metric", "strategy", "kind", "level", "n", "mean_change", "smd", "ci_low",
                                       "ci_high", "boot_low", "boot_high", "p_value", "verdict"))
        print(result.length_confound)
    figures = {"eval_lm": resources.eval_lm, "level": args.level, "papers": result.stats["papers"], "candidates": result.stats["candidates"], "metrics": metrics,
               "strategies": len(strategies), "wall_s": round(wall, 1),
               "adversary_largest_inflation": result.stats.get("adversary_largest_inflation"),
               "failing": [f"{m}/{s}" for m, s in result.validation.filter(pl.col("verdict") == "fail")
                           .select("metric", "strategy").iter_rows()]}
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
