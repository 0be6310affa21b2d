"""Compare two runs' Parquet outputs (e.g. data/demo before and after a refactor), column by column.

    python bench/tools/compare_outputs.py OLD_DIR NEW_DIR     # e.g. /tmp/before/demo data/demo

Prints one line per output file (rows, the largest absolute difference over float columns, the
non-float columns that differ), rows compared in one order (sorted by their non-float columns);
last line JSON with the worst difference overall.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import polars as pl

OUTPUTS = ("score/scores.parquet", "score/candidate_scores.parquet", "validate/validation.parquet",
           "validate/leaderboard.parquet", "validate/pairs.parquet", "validate/human_correlation.parquet",
           "validate/leaderboard_agreement.parquet", "validate/perturbations.parquet",
           "preprocess/judgments.parquet", "generate/candidates.parquet")


def float_diff(a: pl.Series, b: pl.Series) -> float:
    """Largest |a - b| with NaN == NaN and null == null; inf where only one side is missing."""
    x, y = a.to_numpy().astype(float), b.to_numpy().astype(float)
    missing_x, missing_y = np.isnan(x), np.isnan(y)
    if (missing_x != missing_y).any():
        return float("inf")
    both = ~missing_x
    return float(np.abs(x[both] - y[both]).max()) if both.any() else 0.0


def compare(old: Path, new: Path) -> float:
    worst = 0.0
    for rel in OUTPUTS:
        if not (old / rel).is_file() or not (new / rel).is_file():
            print(f"{rel}: missing (old {(old / rel).is_file()}, new {(new / rel).is_file()})")
            continue
        x, y = pl.read_parquet(old / rel), pl.read_parquet(new / rel)
        if x.columns != y.columns or x.height != y.height:
            print(f"{rel}: shapes differ {x.shape} vs {y.shape}")
            worst = float("inf")
            continue
        floats = [c for c in x.columns if x[c].dtype.is_float()]
        # rows in one canonical order (by the non-float columns): the order a stage writes them in is not an output
        keys = [c for c in x.columns if c not in floats and not x[c].dtype.is_nested()]
        if keys:
            x, y = x.sort(keys, nulls_last=True), y.sort(keys, nulls_last=True)
        diff = max((float_diff(x[c], y[c]) for c in floats), default=0.0)
        others = [c for c in x.columns if c not in floats and not x[c].equals(y[c], null_equal=True)]
        worst = max(worst, diff, float("inf") if others else 0.0)
        print(f"{rel}: rows={x.height} max|diff|={diff:.3g} other columns differing: {others}")
    return worst


if __name__ == "__main__":
    print(json.dumps({"max_abs_diff": compare(Path(sys.argv[1]), Path(sys.argv[2]))}))
