"""The token-level f-MI cells and tv_fvar_statement on real reviews, side by side, with wall times.

    PYTHONPATH=. python bench/validity/fmi_cells.py --papers 6 [--data ../shared/data/iclr2023_dev.parquet]

Each human review is a candidate scored leave-one-out against its paper's other reviews (judgment
lines of the GEM release), with K negative references of other papers; the evaluation LM is the
embedded SmolLM2 on CPU (or the CUDA model the score config names). Prints, per metric, the mean
and spread of the pair scores (an f-variational score above 0 means the matched reference agrees
with the candidate more than other papers' reviews do), the pairs scored, and each family's wall
time. Figures only; nothing is tuned to this file.
"""

from __future__ import annotations

import argparse
import random
import time

import polars as pl

from tasks.core.config import ScoreConfig
from tasks.core.frames import human_candidates
from tasks.core.schema import REFERENCES
from tasks.metrics import get, score_metrics
from tasks.metrics.negatives import draw_negatives
from tasks.metrics.resources import build_resources

FAMILIES = {"gem": ["gem"], "fmi_token": ["kl_fvar_token", "tv_direct_token", "tv_direct_marginal_token",
                                          "tv_fvar_token"], "statement_oracle": ["tv_fvar_statement"]}


def references(path: str, papers: int, seed: int) -> pl.DataFrame:
    frame = pl.read_parquet(path)
    chosen = sorted(random.Random(seed).sample(sorted(frame["paper_id"].unique().to_list()), papers))
    return frame.filter(pl.col("paper_id").is_in(chosen)).select(
        "paper_id", pl.format("{}-{}", "paper_id", "reviewer").alias("review_id"), pl.col("review").alias("review_text"),
        pl.col("judgments_reference").str.replace_all(r"\n\s*\n", "\n").str.strip_chars().alias("judgments"),
    ).cast(dict(REFERENCES))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/iclr2023_dev.parquet")
    parser.add_argument("--papers", type=int, default=6)
    parser.add_argument("--negatives", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    refs = references(args.data, args.papers, args.seed)
    cands = human_candidates(refs)
    negatives = draw_negatives(cands, refs, args.negatives, args.seed)
    resources = build_resources(ScoreConfig())
    synopses = pl.DataFrame(schema={"paper_id": pl.String, "abstract": pl.String, "assw": pl.String})
    rows = []
    for family, names in FAMILIES.items():
        started = time.perf_counter()
        scores = score_metrics(names, cands, refs, synopses, resources, negatives=negatives)
        seconds = time.perf_counter() - started
        for name in names:
            got = scores.filter(pl.col("metric") == name)
            ok = got.filter(pl.col("score").is_not_nan())
            rows.append({"family": family, "metric": name, "higher_is_better": get([name])[0].higher_is_better,
                         "pairs": got.height, "scored": ok.height, "mean": ok["score"].mean(),
                         "sd": ok["score"].std(), "family_seconds": round(seconds, 1)})
            print(rows[-1], flush=True)
    table = pl.DataFrame(rows)
    with pl.Config(tbl_rows=50, tbl_cols=20, tbl_width_chars=200):
        print(f"{args.papers} papers, {cands.height} candidates, "
              f"K = {args.negatives}, eval LM {resources.eval_lm}")
        print(table)


if __name__ == "__main__":
    main()
