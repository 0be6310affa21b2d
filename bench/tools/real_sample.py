"""Recreate the shipped sample of real ICLR 2023 reviews (tasks/stages/validate/samples/iclr2023_gem/)
from the ICLR 2023 dev file: `PAPERS` of its 200 papers drawn with `SEED`, their three reviews each with
the GPT-4o judgment lines of the GEM release. A helper for a person, not a measurement: run it from the
repository root, `.venv/bin/python bench/tools/real_sample.py [--check]`; with --check it only says
whether the shipped file is what the dev file gives (exit 1 when not). Without the dev file it prints
{"skipped": ...}.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import polars as pl

DEV_FILE = Path("../shared/data/iclr2023_dev.parquet")
SAMPLE = Path("tasks/stages/validate/samples/iclr2023_gem/reviews.csv")
PAPERS = 30
SEED = 2023


def draw(dev: pl.DataFrame, papers: int = PAPERS, seed: int = SEED) -> pl.DataFrame:
    """`papers` papers of the dev file drawn with `seed` (from its sorted paper ids), every review of
    each, in the review file's columns: paper_id, reviewer, review, judgments."""
    ids = sorted(dev["paper_id"].unique().to_list())
    chosen = sorted(np.random.default_rng(seed).choice(ids, size=min(papers, len(ids)), replace=False).tolist())
    return (dev.filter(pl.col("paper_id").is_in(chosen))
            .select("paper_id", pl.col("reviewer").cast(pl.Int64), "review",
                    pl.col("judgments_reference").alias("judgments"))
            .sort("paper_id", "reviewer"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dev", type=Path, default=DEV_FILE)
    parser.add_argument("--out", type=Path, default=SAMPLE)
    parser.add_argument("--check", action="store_true", help="compare with the shipped file; write nothing")
    args = parser.parse_args()
    if not args.dev.is_file():
        print(json.dumps({"skipped": f"{args.dev} not found"}))
        return 0
    sample = draw(pl.read_parquet(args.dev))
    if args.check:
        shipped = pl.read_csv(args.out, infer_schema=False).with_columns(pl.col("reviewer").cast(pl.Int64))
        same = shipped.equals(sample)
        print(json.dumps({"papers": sample["paper_id"].n_unique(), "reviews": sample.height, "same": same}))
        return 0 if same else 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    sample.write_csv(args.out)
    print(json.dumps({"papers": sample["paper_id"].n_unique(), "reviews": sample.height, "out": str(args.out),
                      "bytes": args.out.stat().st_size}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
