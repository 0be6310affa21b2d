"""What the paired comparisons and rank intervals cost next to the leaderboard they annotate, and how
often they find a built-in difference, on synthetic candidate scores.

    PYTHONPATH=. python bench/cost/compare.py [--models 12] [--papers 100] [--metrics 8] [--resamples 2000]

Each model's score on a paper is the paper's difficulty plus the model's skill plus noise; models
come in pairs, the second of a pair `gap` better than the first on average. Printed: the seconds the
leaderboard takes and the seconds the comparisons take (same run, same data), the ratio, and the
share of built-in differences found significant after the Holm correction (power) and of identical
pairs found significant (false positives: the twins). Last line JSON.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import polars as pl

from tasks.stages.validate.comparisons import CompareSettings, compare
from tasks.stages.validate.leaderboard import leaderboard, per_paper


def synthetic_scores(models: int, papers: int, metrics: int, gap: float, noise: float, seed: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    difficulty = rng.normal(0.0, 1.0, papers)
    rows: dict[str, list] = {"paper_id": [], "candidate": [], "source": [], "metric": [], "eval_lm": [], "score": []}
    names = ["bleu", "rouge_l", "bertscore", "gem", "gem_raw", "gem_s_abstract", "gem_s_assw", "tv_fvar_statement"]
    for m in range(metrics):
        metric, eval_lm = names[m % len(names)], f"lm{m // len(names)}"
        base = rng.normal(0.0, 1.0, papers)
        previous = base
        for k in range(models):
            twin = k == models - 1            # the last model copies the one before it exactly
            skill = (k // 2) * 3 * gap + (gap if k % 2 else 0.0)
            scores = previous if twin else base + difficulty + skill + rng.normal(0.0, noise, papers)
            previous = scores
            name = f"m{k - 1:02d}-twin" if twin else f"m{k:02d}"
            rows["paper_id"] += [f"P{j:04d}" for j in range(papers)]
            rows["candidate"] += [f"{name}/P{j:04d}" for j in range(papers)]
            rows["source"] += [name] * papers
            rows["metric"] += [metric] * papers
            rows["eval_lm"] += [eval_lm] * papers
            rows["score"] += list(map(float, scores))
    return pl.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=12)
    parser.add_argument("--papers", type=int, default=100)
    parser.add_argument("--metrics", type=int, default=8)
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--gap", type=float, default=0.15)
    parser.add_argument("--noise", type=float, default=0.5)
    args = parser.parse_args()
    scores = synthetic_scores(args.models, args.papers, args.metrics, args.gap, args.noise, seed=0)
    start = time.perf_counter()
    board = leaderboard(scores)
    board_s = time.perf_counter() - start
    start = time.perf_counter()
    pairs, ranks = compare(per_paper(scores), CompareSettings(resamples=args.resamples),
                           board.select("metric", "eval_lm", "model", "rank"))
    compare_s = time.perf_counter() - start
    group = lambda column: pl.col(column).str.slice(1, 2).cast(pl.Int64) // 2   # noqa: E731 - models 2i, 2i+1
    built = pairs.filter((group("model_a") == group("model_b")) & ~pl.col("model_a").str.ends_with("twin")
                         & ~pl.col("model_b").str.ends_with("twin"))
    twins = pairs.filter(pl.col("model_a").str.ends_with("twin") | pl.col("model_b").str.ends_with("twin"))
    twins = twins.filter(pl.col("model_a").str.slice(0, 3) == pl.col("model_b").str.slice(0, 3))
    figures = {
        "models": args.models, "papers": args.papers, "boards": args.metrics, "pairs": pairs.height,
        "resamples": args.resamples, "leaderboard_s": round(board_s, 3), "comparisons_s": round(compare_s, 3),
        "ratio": round(compare_s / board_s, 1),
        "adjacent_gap_found": round(float(built["significant"].mean()), 3) if built.height else None,
        "twins_found_different": int(twins["significant"].sum()),
        "mean_rank_interval_width": round(float((ranks["rank_high"] - ranks["rank_low"]).mean()), 2),
    }
    print(f"leaderboard {board_s:.2f} s, comparisons + rank intervals {compare_s:.2f} s "
          f"({figures['ratio']}x) for {pairs.height} pairs on {args.metrics} boards of {args.papers} papers")
    print(f"pairs built {args.gap} apart (noise sd {args.noise}) found different: {figures['adjacent_gap_found']:.0%}; "
          f"identical twins found different: {figures['twins_found_different']} of {twins.height}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
