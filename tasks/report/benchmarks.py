"""How a leaderboard agrees with other benchmarks, and how its scores grow with model size.

GEM section 5 ("GRE-bench vs. Other benchmarks", Table 3) ranks the candidate models by their
GRE-bench score and by their scores on MMLU, ARC-C, HellaSwag, GSM8K, MATH, HumanEval and GPQA, and
reports Spearman's rank correlation per pair; its Figure 5 draws the score against parameter size
within each model family. The pieces here do the same for any table of scores:

* `spearman_interval`: Spearman's rho of the models that have both scores, with a 95% interval from
  Fisher's z transform and the Bonett-Wright standard error sqrt((1 + rho^2 / 2) / (n - 3)), which
  suits rank correlations better than the Pearson 1 / sqrt(n - 3);
* `correlations`: one row per (metric, benchmark): rho, n, the interval, or NaN with a reason;
* `match_models`: which models of a leaderboard a benchmark file names, and which it does not
  (listed, never dropped silently);
* `plot_size`: the score against parameter size (log scale), one line per family.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import polars as pl

INTERVAL = "Fisher z, Bonett-Wright standard error sqrt((1+rho^2/2)/(n-3))"
MIN_MODELS = 4    # n - 3 must be positive for the interval
SIZE = "parameter_size"   # the benchmark name under which a benchmark file gives a model's parameter count

CORRELATION_SCHEMA = {"metric": pl.String, "benchmark": pl.String, "spearman": pl.Float64, "n": pl.Int64,
                      "ci_low": pl.Float64, "ci_high": pl.Float64, "reason": pl.String}


def spearman_interval(x: Sequence[float], y: Sequence[float], level: float = 0.95
                      ) -> tuple[float, float, float, str | None]:
    """(rho, low, high, reason) of the pairs where both values are finite; NaN with a reason when there are
    fewer than MIN_MODELS pairs or one side is constant (rho undefined). A rho of +-1 has the interval
    [rho, rho] (the z transform is infinite there)."""
    from scipy.stats import norm, spearmanr

    pairs = [(a, b) for a, b in zip(x, y, strict=True) if _finite(a) and _finite(b)]
    n = len(pairs)
    if n < MIN_MODELS:
        return math.nan, math.nan, math.nan, f"fewer_than_{MIN_MODELS}_models"
    xs, ys = zip(*pairs, strict=True)
    if len(set(xs)) == 1 or len(set(ys)) == 1:
        return math.nan, math.nan, math.nan, "constant_scores"
    rho = float(spearmanr(xs, ys).statistic)
    if abs(rho) > 1 - 1e-12:   # the same ranking (up to rounding): no spread to put an interval on
        rho = math.copysign(1.0, rho)
        return rho, rho, rho, None
    z = math.atanh(rho)
    half = float(norm.ppf(0.5 + level / 2)) * math.sqrt((1 + rho * rho / 2) / (n - 3))
    return rho, math.tanh(z - half), math.tanh(z + half), None


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def correlations(scores: pl.DataFrame, benchmarks: pl.DataFrame, level: float = 0.95) -> pl.DataFrame:
    """One row per (metric, benchmark) in the order first seen: Spearman over the models with both scores.

    `scores`: model, metric, score (one per model and metric); `benchmarks`: model, benchmark, score."""
    rows = []
    bench = benchmarks.filter(pl.col("benchmark") != SIZE)
    for metric in dict.fromkeys(scores["metric"].to_list()):
        ours = dict(scores.filter(pl.col("metric") == metric).select("model", "score").iter_rows())
        for name in dict.fromkeys(bench["benchmark"].to_list()):
            theirs = dict(bench.filter(pl.col("benchmark") == name).select("model", "score").iter_rows())
            both = [m for m in ours if m in theirs and _finite(ours[m]) and _finite(theirs[m])]
            rho, low, high, reason = spearman_interval([ours[m] for m in both], [theirs[m] for m in both], level)
            rows.append({"metric": metric, "benchmark": name, "spearman": rho, "n": len(both),
                         "ci_low": low, "ci_high": high, "reason": reason})
    return pl.DataFrame(rows, schema=CORRELATION_SCHEMA)


def match_models(board_models: Sequence[str], file_models: Sequence[str]) -> tuple[list[str], list[str]]:
    """(leaderboard models the file does not name, file models not on the leaderboard), each sorted. Names
    match exactly; a name that differs only in case or surrounding spaces does not match, and is listed."""
    board, named = set(board_models), set(file_models)
    return sorted(board - named), sorted(named - board)


def read_benchmarks_csv(path: Path) -> pl.DataFrame:
    """A benchmark file (model, benchmark, score), checked: ValueError with one line naming what is wrong.
    A row whose benchmark is `parameter_size` gives the model's parameter count (for the size plot)."""
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    try:
        frame = pl.read_csv(path, infer_schema_length=0)
    except (pl.exceptions.PolarsError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not a readable CSV ({str(error).splitlines()[0]})") from None
    missing = [c for c in ("model", "benchmark", "score") if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)} (found: {', '.join(frame.columns)}; "
                         "needs model, benchmark, score)")
    frame = frame.select(pl.col("model").str.strip_chars(), pl.col("benchmark").str.strip_chars(),
                         score=pl.col("score").str.strip_chars().cast(pl.Float64, strict=False),
                         raw=pl.col("score"))
    bad = frame.filter(pl.col("score").is_null() & pl.col("raw").is_not_null() & (pl.col("raw").str.strip_chars() != ""))
    if bad.height:
        row = bad.row(0, named=True)
        raise ValueError(f"{path}: score {row['raw']!r} of {row['model']} on {row['benchmark']} is not a number")
    dup = frame.group_by("model", "benchmark").len().filter(pl.col("len") > 1)
    if dup.height:
        row = dup.row(0, named=True)
        raise ValueError(f"{path}: {row['model']} has {row['len']} rows for {row['benchmark']} (give one)")
    return frame.drop("raw").filter(pl.col("score").is_not_null() & pl.col("model").is_not_null())


def family(model: str) -> str:
    """A model's family for the size plot: the organisation before '/', else the name up to its first '-'."""
    return model.split("/", 1)[0] if "/" in model else model.split("-", 1)[0]


def plot_size(points: pl.DataFrame, path: Path, title: str) -> Path | None:
    """The score against parameter size (log x) per metric panel, one line per family, sorted by size.

    `points`: model, metric, score, size (parameters), family; rows without a finite size are left out.
    None when no row has both a size and a score."""
    from tasks.report.common import pyplot

    usable = points.filter(pl.col("size").is_not_null() & (pl.col("size") > 0) & pl.col("score").is_not_nan())
    if usable.is_empty():
        return None
    plt = pyplot()
    metrics = list(dict.fromkeys(usable["metric"].to_list()))
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), 4.2), squeeze=False)
    for ax, metric in zip(axes.flat, metrics, strict=True):
        for (name,), group in usable.filter(pl.col("metric") == metric).sort("family", "size").group_by(
                "family", maintain_order=True):
            ax.plot(group["size"].to_list(), group["score"].to_list(), marker="o", label=name)
        ax.set_xscale("log")
        ax.set_xlabel("parameters (log scale)", fontsize=8)
        ax.set_ylabel(f"{metric} score", fontsize=8)
        ax.set_title(metric, fontsize=9)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


class Comparison:
    """A leaderboard set against a benchmark file: the correlation rows per (metric, eval_lm, benchmark), the
    names on one side only, and the size plot's points (empty when the file gives no sizes)."""

    def __init__(self, board: pl.DataFrame, bench: pl.DataFrame, level: float = 0.95) -> None:
        models = board.filter(~pl.col("is_human")) if "is_human" in board.columns else board
        models = models.filter(pl.col("mean").is_not_null())
        parts = []
        for (metric, lm), group in models.sort("metric", "eval_lm").group_by("metric", "eval_lm", maintain_order=True):
            scores = group.select("model", pl.lit(metric).alias("metric"), pl.col("mean").alias("score"))
            parts.append(correlations(scores, bench, level).with_columns(pl.lit(lm, pl.String).alias("eval_lm")))
        self.table = (pl.concat(parts) if parts else pl.DataFrame(schema={**CORRELATION_SCHEMA, "eval_lm": pl.String})
                      ).select("metric", "eval_lm", "benchmark", "spearman", "n", "ci_low", "ci_high", "reason")
        self.interval = INTERVAL
        self.board_only, self.file_only = match_models(models["model"].unique().to_list(), bench["model"].unique().to_list())
        sizes = bench.filter(pl.col("benchmark") == SIZE).select("model", pl.col("score").alias("size"))
        self.points = (models.join(sizes, on="model", how="inner")
                       .select("model", (pl.col("metric") + " (" + pl.col("eval_lm").fill_null("-") + ")").alias("metric"),
                               pl.col("mean").alias("score"), "size")
                       .with_columns(family=pl.col("model").map_elements(family, return_dtype=pl.String)))

    def markdown(self, figure: Path | None) -> list[str]:
        """The report's section: the table, the unmatched names, the figure."""
        from tasks.report.common import markdown_table

        out = ["", "## Agreement with other benchmarks", "",
               f"Spearman's rank correlation of each leaderboard's model means with each benchmark of the file, over "
               f"the models that have both (n); 95% interval: {self.interval}. NaN with a reason where it cannot be "
               "computed.", ""]
        out.append(markdown_table(self.table, list(self.table.columns)) if self.table.height
                   else "No benchmark in the file (besides parameter_size).")
        out += ["", "Leaderboard models the benchmark file does not name (not in any correlation): "
                + (", ".join(self.board_only) or "none") + ".",
                "", "Models of the benchmark file not on the leaderboard: " + (", ".join(self.file_only) or "none") + "."]
        if figure is not None:
            out += ["", f"![score against parameter size]({figure.name})"]
        elif self.points.is_empty():
            out += ["", "No size plot: the file gives no parameter_size for a leaderboard model."]
        return out
