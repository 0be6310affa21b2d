"""Compare two runs' Parquet outputs (e.g. data/demo before and after a refactor), column by column.

    python bench/compare_outputs.py OLD_DIR NEW_DIR     # e.g. /tmp/before/demo data/demo

Prints one line per output file (rows, the largest absolute difference over float columns, the
non-float columns that differ); last line JSON with the worst difference overall.
"""
import json
import math
import sys
from pathlib import Path

import polars as pl

a, b = Path(sys.argv[1]), Path(sys.argv[2])
worst = 0.0
for rel in ["score/scores.parquet","score/candidate_scores.parquet","validate/validation.parquet","validate/leaderboard.parquet",
            "validate/pairs.parquet","validate/human_correlation.parquet","validate/leaderboard_agreement.parquet","validate/perturbations.parquet",
            "preprocess/judgments.parquet","generate/candidates.parquet"]:
    fa, fb = a/rel, b/rel
    if not fa.exists() or not fb.exists():
        print(rel, "missing", fa.exists(), fb.exists()); continue
    x, y = pl.read_parquet(fa), pl.read_parquet(fb)
    if x.columns != y.columns or x.height != y.height:
        print(rel, "SHAPE", x.shape, y.shape, set(x.columns) ^ set(y.columns)); continue
    keys = [c for c in x.columns if x[c].dtype in (pl.String, pl.Boolean, pl.Int64, pl.Int32) ]
    x = x.sort(x.columns, nulls_last=True) if False else x
    d = 0.0; other = []
    for c in x.columns:
        if x[c].dtype.is_float():
            u, v = x[c].to_numpy(), y[c].to_numpy()
            for p, q in zip(u, v):
                if (math.isnan(p) and math.isnan(q)): continue
                if math.isnan(p) != math.isnan(q): d = float("inf"); continue
                d = max(d, abs(p - q))
        elif not x[c].equals(y[c]):
            other.append(c)
    worst = max(worst, d)
    print(f"{rel}: rows={x.height} max|diff|={d:.3g} non-float columns differing: {other}")
print(json.dumps({"max_abs_diff": worst}))
