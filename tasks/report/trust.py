"""What the report and the site say about trusting the scores: what each model's reviews
cost beside their quality, the references flagged as likely AI-written, and the injection track.

A cost nobody knows (a submitted system reports none) stays unknown: it is written "unknown" and
left out of the cost-quality figure, never drawn or summed as 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import polars as pl

from tasks.report.common import fmt, markdown_table, pyplot

UNKNOWN = "unknown"


def quality_metric(board: pl.DataFrame) -> str | None:
    """The metric the cost is set beside: GEM when scored, else the board's first metric."""
    if not board.height:
        return None
    metrics = sorted(set(board["metric"].to_list()))
    return "gem" if "gem" in metrics else metrics[0]


def cost_quality(board: pl.DataFrame, costs: pl.DataFrame) -> pl.DataFrame:
    """Per candidate model (not the human baseline): its mean on `quality_metric` (first evaluation LM)
    beside reviews, tokens and USD per review from `candidate_costs` (null: unknown)."""
    metric = quality_metric(board)
    if metric is None or not costs.height:
        return pl.DataFrame()
    rows = board.filter((pl.col("metric") == metric) & ~pl.col("is_human"))
    rows = rows.filter(pl.col("eval_lm") == rows["eval_lm"].sort().first()) if rows.height else rows
    return (costs.select("model", "reviews", "tokens_per_review", "usd_per_review", "cost_unknown")
            .join(rows.select("model", pl.lit(metric).alias("metric"), "mean", "ci_low", "ci_high"), on="model", how="left")
            .sort("model"))


def shown_cost(value: object, digits: int = 4) -> str:
    """A cost for people: "unknown" for a missing one (never 0)."""
    if value is None or (isinstance(value, float) and value != value):
        return UNKNOWN
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def cost_markdown(frame: pl.DataFrame) -> list[str]:
    if not frame.height:
        return []
    metric = frame["metric"].drop_nulls().first() or "quality"
    out = ["", "## Cost beside quality", "",
           f"Tokens and US dollars per review at the configured prices (`candidate_costs`), beside the mean "
           f"{metric}. *unknown*: some review's cost is not known (a submitted system reports none), never 0; a "
           "local model costs no API dollars.", "",
           f"| model | reviews | tokens / review | USD / review | {metric} mean | CI low | CI high |", "|---|---|---|---|---|---|---|"]
    for r in frame.iter_rows(named=True):
        tokens = UNKNOWN if r["tokens_per_review"] is None else f"{r['tokens_per_review']:.0f}"
        out.append(f"| {r['model']} | {r['reviews']} | {tokens} | {shown_cost(r['usd_per_review'])} | {fmt(r['mean'])} | "
                   f"{fmt(r['ci_low'])} | {fmt(r['ci_high'])} |")
    return out


def plot_cost_quality(frame: pl.DataFrame, path: Path) -> Path | None:
    """Each model's mean against its USD per review (tokens per review when no model costs any
    dollars); models of unknown cost are named under the plot, not drawn."""
    if not frame.height:
        return None
    axis, known, unknown = cost_axis(frame)
    if not known.height:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.errorbar(known[axis], known["mean"], yerr=[known["mean"] - known["ci_low"], known["ci_high"] - known["mean"]],
                fmt="o", capsize=3)
    for r in known.iter_rows(named=True):
        ax.annotate(r["model"], (r[axis], r["mean"]), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel("USD per review" if axis == "usd_per_review" else "tokens per review")
    ax.set_ylabel(f"mean {frame['metric'].drop_nulls().first()}")
    if unknown:
        ax.set_title(f"cost unknown, not drawn: {', '.join(unknown)}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def cost_axis(frame: pl.DataFrame) -> tuple[str, pl.DataFrame, list[str]]:
    """(cost column, rows with a known cost and a mean, models whose cost is unknown): USD per review
    unless no model costs any dollars, then tokens per review."""
    scored = frame.filter(pl.col("mean").is_not_null() & pl.col("mean").is_not_nan())
    dollars = scored.filter(pl.col("usd_per_review").is_not_null())
    axis = "usd_per_review" if dollars.height and (dollars["usd_per_review"] > 0).any() else "tokens_per_review"
    known = scored.filter(pl.col(axis).is_not_null() & pl.col("ci_low").is_not_null())
    return axis, known, sorted(set(scored.filter(pl.col(axis).is_null())["model"].to_list()))


def trust_markdown(frames: Mapping[str, pl.DataFrame]) -> list[str]:
    """The report's sections on cost, flagged references and the injection track (only those with data)."""
    board = frames.get("leaderboard", pl.DataFrame())
    out = cost_markdown(cost_quality(board, frames.get("candidate_costs", pl.DataFrame())))
    flags = frames.get("reference_flags", pl.DataFrame())
    if flags.height:
        flagged = int(flags["flagged"].fill_null(False).sum())
        out += ["", "## References flagged as likely AI-written", "",
                f"{flagged} of {flags.height} human references score below the Binoculars threshold "
                f"({_threshold(flags)}; `reference_flags`). The leaderboard's `mean_unflagged` leaves them "
                "out, as references and as the f-variational metrics' negatives; `flagged_shift` is the change (the rows below: those resting on a flagged reference)."]
        if "n_flagged" in board.columns:
            moved = board.filter(pl.col("n_flagged") > 0)
            if moved.height:
                out += ["", markdown_table(moved, ["metric", "model", "mean", "mean_unflagged", "flagged_shift",
                                                   "n_flagged"])]
    shifts = frames.get("injection_shifts", pl.DataFrame())
    if shifts.height:
        out += ["", "## Injection track", "",
                "Shift of each model's reviews of planted copies against the clean copies (`injection_shifts`).", "",
                markdown_table(shifts, ["model", "variant", "measure", "n_papers", "shift", "ci_low", "ci_high",
                                        "reason"])]
    return out


def _threshold(flags: pl.DataFrame) -> str:
    """The Binoculars threshold the flags were read against, with its source; where the form in use has
    no calibrated threshold, that said (nothing is flagged then)."""
    value = flags["threshold"].drop_nulls()
    if value.is_empty():
        return "no threshold calibrated for this form, so nothing flagged: `grebench calibrate binoculars` sets one"
    source = flags["threshold_source"].drop_nulls() if "threshold_source" in flags.columns else pl.Series([])
    return f"{value[0]:g}" + (f", {source[0]}" if not source.is_empty() else "")
