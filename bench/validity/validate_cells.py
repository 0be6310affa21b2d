"""The validation table of the f-MI cells, an LLM judge and the classic baselines, side by side, on the
shared ICLR 2023 dev file, with each metric's wall time and language-model requests per 100 pairs.

    PYTHONPATH=. .venv/bin/python bench/validity/validate_cells.py --papers 60
        [--metrics gem,tvd_mi,tv_fvar_statement,llm_judge,bleu,rouge_l,bertscore] [--negatives 4]
        [--strategies sentence_deletion,...] [--level judgments|raw] [--cache data/cache/llm]

One seeded candidate review per paper, the paper's other reviews as references (the validation
workflow's own sample, tasks/stages/validate/workflow.py), every strategy that runs offline (the
deterministic ones, tasks/stages/validate/perturb.py DETERMINISTIC) unless `--strategies` names others. The
evaluation LM is the embedded SmolLM2; the oracle cells read its logits (`readout`), the judge
generates with it through the local backend (greedy, answers cached under `--cache`). The file's
`judgments_reference` column gives each review's judgment lines; `--level raw` drops them, perturbs
the raw reviews and preprocesses every text with the embedded SmolLM2 (the [preprocess] defaults).

Each metric is validated in its own run on the same sample, so its wall time is its own (the
raw-level preprocessing is cached across runs: the first metric that reads judgments pays it).
Requests counted per metric: log-likelihood requests the engine scored (`loglik`), oracle questions
read from the logits (`readout`, one forward pass each), generation calls (`generate`). A pair is a
(scored candidate version, reference) pair. Prints the validation table and the cost table; the
last line is JSON. Figures only: nothing here is tuned to this file.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import polars as pl
from dev_file import add_options, load_reviews, raw_level

from tasks.core.config import (
    LLMConfig,
    ValidateConfig,  # noqa: E402
)
from tasks.lm import ModelSpec
from tasks.lm.lazy import LazyLM
from tasks.metrics import Resources, get
from tasks.metrics.readout_panel import engine_answers, engine_readout
from tasks.metrics.resources import EMBED_MODEL, engine_loglikelihood, memoized, token_embeddings
from tasks.stages.validate.strategies import DETERMINISTIC
from tasks.stages.validate.workflow import run_validation

DEFAULT_METRICS = "gem,tvd_mi,tv_fvar_statement,llm_judge,bleu,rouge_l,bertscore"


class Counted:
    """Wraps the resources' model calls and counts what each one is asked."""

    def __init__(self, spec: ModelSpec, token_budget: int, judge: LLMConfig, cache: Path) -> None:
        self.counts: Counter[str] = Counter()
        self.spec, self.token_budget, self.judge, self.cache = spec, token_budget, judge, cache

    def resources(self) -> Resources:
        loglik = engine_loglikelihood(self.spec, self.token_budget)
        readout = engine_readout(self.spec, self.token_budget)
        answers = engine_answers(self.spec, self.token_budget)
        llm = LazyLM(self.judge, self.cache)
        counts = self.counts

        def loglikelihood(requests: pl.DataFrame) -> pl.DataFrame:
            counts["loglik"] += requests.height
            return loglik(requests)

        def read(requests: pl.DataFrame) -> pl.DataFrame:
            counts["readout"] += requests.height
            return readout(requests)

        def read_answers(prompts, choices):
            counts["readout"] += len(prompts)
            return answers(prompts, choices)

        generate = llm.generate

        def counted_generate(requests, accept=None):
            counts["generate"] += len(requests)
            return generate(requests, accept)

        llm.generate = counted_generate  # type: ignore[method-assign]
        return Resources(eval_lm=self.spec.resolved().key, loglikelihood=memoized(loglikelihood),
                         embed=token_embeddings, embed_model=EMBED_MODEL, readout=read, llm=llm,
                         read_answers=read_answers, oracle="readout")


def main() -> None:
    parser = argparse.ArgumentParser()
    add_options(parser)
    parser.add_argument("--metrics", default=DEFAULT_METRICS)
    parser.add_argument("--strategies", default=",".join(DETERMINISTIC))
    parser.add_argument("--negatives", type=int, default=4)
    args = parser.parse_args()

    reviews = load_reviews(args.data)
    metrics = [m for m in args.metrics.split(",") if m]
    strategies = [s for s in args.strategies.split(",") if s]
    if args.papers < 2 and any(m.negatives for m in get(metrics)):   # unknown names fail here too
        parser.error("the f-variational cells draw negatives from other papers: --papers must be 2 or more")
    args.cache.mkdir(parents=True, exist_ok=True)
    preprocess = None
    if args.level == "raw":
        reviews, preprocess = raw_level(reviews, args.max_tokens, args.cache)
    counted = Counted(ModelSpec(), args.token_budget, LLMConfig(backend="local", model="smollm2"), args.cache)

    tables, costs = [], []
    started = time.perf_counter()
    for metric in metrics:
        counted.counts.clear()
        t0 = time.perf_counter()
        result = run_validation(reviews, ValidateConfig(strategies=strategies, metrics=[metric], max_papers=args.papers, min_pairs=args.min_pairs, level=(args.level,)), resources=counted.resources(), negatives=args.negatives, preprocess=preprocess)
        wall = time.perf_counter() - t0
        pairs = 2 * result.stats["scored_candidates"]   # three reviews a paper: two references per candidate
        tables.append(result.validation)
        costs.append({"metric": metric, "wall_s": round(wall, 1), "pairs": pairs,
                      "s_per_100_pairs": round(100 * wall / pairs, 1),
                      **{f"{k}_per_100_pairs": round(100 * counted.counts[k] / pairs, 1)
                         for k in ("loglik", "readout", "generate")}})
        with pl.Config(tbl_rows=100, tbl_cols=20, tbl_width_chars=220, fmt_str_lengths=40):   # as each metric ends
            print(result.validation.select("metric", "strategy", "kind", "level", "n", "smd", "p_value", "verdict"))
        print(json.dumps(costs[-1]), flush=True)
    validation = pl.concat(tables, how="vertical_relaxed")
    cost = pl.DataFrame(costs)
    with pl.Config(tbl_rows=400, tbl_cols=20, tbl_width_chars=220, fmt_str_lengths=40):
        print(validation.select("metric", "strategy", "kind", "level", "n", "mean_change", "smd", "ci_low", "ci_high",
                                "p_value", "verdict"))
        print(cost)
    fails = validation.filter(pl.col("verdict") == "fail")
    print(json.dumps({
        "eval_lm": "smollm2 (embedded, CPU)", "oracle": "readout", "judge": "local smollm2, greedy",
        "level": args.level, "papers": result.stats["papers"], "candidates": result.stats["candidates"],
        "negatives": args.negatives, "strategies": strategies, "wall_s": round(time.perf_counter() - started, 1),
        "cost": costs,
        "failed": {m: fails.filter(metric=m)["strategy"].to_list() for m in metrics},
        "inconclusive": int((validation["verdict"] == "inconclusive").sum()),
    }))


if __name__ == "__main__":
    main()
