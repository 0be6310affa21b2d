"""`grebench report`: the leaderboard figure, the validation heat map and a markdown summary.

Reads the `leaderboard`, `validation` and `human_correlation` tables (from the DuckDB results
database, or frames handed in) and writes into `out_dir`:

    leaderboard.png   per metric and evaluation LM: each model's mean score with its CI, the human
                      baseline as a grey line and band (like the GEM paper's figure 5)
    validation.png    metric x strategy heat map of the SMD, each cell marked pass / FAIL / inconclusive
    report.md         the overview first (a model per row, a headline metric per column: tasks/report/overview.py),
                      the same numbers as tables, the metrics that fail any test and, per metric, the
                      degradations and manipulations it fails with counts (tasks/stages/validate/failures.py);
                      cost per review beside quality, flagged references, the injection track (trust.py)
    cost_quality.png  each model's mean against its cost per review, when costs are known (trust.py)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from tasks.report import overview
from tasks.report.common import finite, markdown_table, pyplot, read_tables
from tasks.stages.validate.failures import failures_markdown

TABLES = ("leaderboard", "validation", "human_correlation", "length_confound",
          "focus_categories", "review_quality_models", "rating_relation",   # these three: tasks/report/review_quality.py
          "candidate_costs", "reference_flags", "injection_shifts",         # these three: tasks/report/trust.py
          "pairwise_board", "pairwise_bias",                                # the pairwise judge (sql/marts/pairwise_*.sql)
          "overview")                                                       # the first section (tasks/report/overview.py)


def model_label(board: pl.DataFrame) -> pl.Expr:
    """The model's name as the report shows it: "<name> (submitted)" for a system's submitted reviews."""
    if "kind" not in board.columns:
        return pl.col("model")
    return (pl.when(pl.col("kind") == "submitted").then(pl.col("model") + " (submitted)")
            .otherwise(pl.col("model")).alias("model"))


def plot_leaderboard(board: pl.DataFrame, path: Path) -> Path:
    """One panel per (metric, eval_lm): models sorted by mean with CI bars, the human baseline as a band."""
    plt = pyplot()
    groups = [] if board.is_empty() else list(board.sort("metric", "eval_lm").group_by("metric", "eval_lm",
                                                                                        maintain_order=True))
    cols = max(1, min(2, len(groups)))
    rows = max(1, math.ceil(len(groups) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 3.8 * rows), squeeze=False)
    for ax in axes.flat[len(groups):]:
        ax.axis("off")
    if not groups:
        axes[0, 0].text(0.5, 0.5, "no leaderboard yet: run the score stage", ha="center", va="center")
    for ax, ((metric, lm), group) in zip(axes.flat, groups, strict=False):
        models = group.filter(~pl.col("is_human") & pl.col("mean").is_not_nan()).sort("mean")
        human = group.filter(pl.col("is_human"))
        x = list(range(models.height))
        if models.height:
            means = models["mean"].to_list()
            low = [m - lo if finite(lo) else 0 for m, lo in zip(means, models["ci_low"].to_list(), strict=True)]
            high = [hi - m if finite(hi) else 0 for m, hi in zip(means, models["ci_high"].to_list(), strict=True)]
            ax.errorbar(x, means, yerr=[low, high], fmt="o", capsize=4, color="tab:blue", label="model (CI)")
            ax.set_xticks(x, models.select(model_label(models))["model"].to_list(), rotation=30, ha="right",
                          fontsize=8)
        else:
            ax.set_xticks([])
            ax.text(0.5, 0.9, "no model candidates yet", ha="center", transform=ax.transAxes, fontsize=8)
        if human.height and finite(human["mean"][0]):
            h = human.row(0, named=True)
            ax.axhline(h["mean"], color="grey", lw=1.5, label=f"human baseline (n={h['n_papers']})")
            if finite(h["ci_low"]) and finite(h["ci_high"]):
                ax.axhspan(h["ci_low"], h["ci_high"], color="grey", alpha=0.25, lw=0)
        conf = group["confidence"].drop_nulls()
        level = f"{100 * conf[0]:.0f}% CI" if conf.len() else "CI"
        ax.set_title(f"{metric}  ({lm}; {level})", fontsize=9)
        ax.set_ylabel("mean score over papers", fontsize=8)
        ax.margins(x=0.15)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle("GRE-bench leaderboard")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _verdict_label(row: Mapping[str, object]) -> str:
    """pass / FAIL / inconclusive ("n/a" when the test could not run at all)."""
    verdict = row.get("verdict")
    if verdict is None:
        verdict = "n/a" if row["passed"] is None else ("pass" if row["passed"] else "fail")
    if verdict == "inconclusive" and not row.get("n"):
        return "n/a"
    return {"fail": "FAIL", "inconclusive": "inconcl."}.get(str(verdict), str(verdict))


def _run_line(validation: pl.DataFrame) -> str:
    """A second title line: evaluation LM, seed, levels and the LLM perturbers, where the table has them."""
    parts = []
    for column, label in (("eval_lm", "eval LM"), ("seed", "seed"), ("level", "level")):
        if column in validation.columns and validation[column].drop_nulls().len():
            values = sorted({str(v) for v in validation[column].drop_nulls().to_list()})
            parts.append(f"{label}: {', '.join(values)}")
    if "perturber" in validation.columns:
        llms = sorted({str(v) for v in validation["perturber"].drop_nulls()
                       if not str(v).startswith(("rules", "search"))})
        if llms:
            parts.append(f"perturbed by: {', '.join(llms)}")
    return "\n" + "; ".join(parts) if parts else ""


def plot_validation(validation: pl.DataFrame, path: Path) -> Path:
    """Metric x strategy heat map of the SMD (diverging colours around 0), each cell marked pass / FAIL."""
    plt = pyplot()
    import numpy as np

    if validation.height and "level" in validation.columns and validation["level"].drop_nulls().n_unique() > 1:
        validation = validation.with_columns(   # one heat-map row per metric and level
            metric=pl.col("metric") + pl.lit(" [") + pl.col("level").fill_null("?") + pl.lit("]"))
    metrics = list(dict.fromkeys(validation["metric"].to_list())) if validation.height else []
    strategies = list(dict.fromkeys(validation["strategy"].to_list())) if validation.height else []
    grid = np.full((max(1, len(metrics)), max(1, len(strategies))), np.nan)
    labels: dict[tuple[int, int], str] = {}
    for row in validation.iter_rows(named=True):
        i, j = metrics.index(row["metric"]), strategies.index(row["strategy"])
        smd = row["smd"]
        grid[i, j] = smd if finite(smd) else np.nan
        verdict = _verdict_label(row)
        n = f" n={row['n']}" if row.get("n") is not None else ""
        labels[(i, j)] = f"{smd:+.2f}\n{verdict}{n}" if finite(smd) else f"{verdict}{n}"
    fig, ax = plt.subplots(figsize=(1.6 * max(3, len(strategies)) + 2, 0.6 * max(3, len(metrics)) + 1.5))
    bound = float(np.nanmax(np.abs(grid))) if np.isfinite(grid).any() else 1.0
    image = ax.imshow(np.ma.masked_invalid(grid), cmap="coolwarm", vmin=-bound, vmax=bound, aspect="auto")
    fig.colorbar(image, ax=ax, label="SMD (perturbed - original)")
    ax.set_xticks(range(len(strategies)), [s.replace("_", "\n") for s in strategies], fontsize=8)
    ax.set_yticks(range(len(metrics)), metrics, fontsize=8)
    for (i, j), text in labels.items():
        bold = "FAIL" in text
        ax.text(j, i, text, ha="center", va="center", fontsize=7, fontweight="bold" if bold else "normal")
    if not labels:
        ax.text(0, 0, "no validation results yet", ha="center", va="center")
    ax.set_title("Metric validation: degradations should lower the score, manipulations not raise it"
                 + _run_line(validation), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def markdown(frames: Mapping[str, Any], figures: Mapping[str, Path]) -> str:
    board, validation = frames.get("leaderboard", pl.DataFrame()), frames.get("validation", pl.DataFrame())
    correlation = frames.get("human_correlation", pl.DataFrame())
    out = ["# GRE-bench report", ""]
    if frames.get("_pipeline") is not None:
        out += [f"Results of pipeline `{frames['_pipeline']}`.", ""]
    if "overview" in frames:     # the overview first (a frame handed in without one starts at the figures)
        out += overview.markdown(frames["overview"])
    out += [f"![{name}]({path.name})" for name, path in figures.items()] + [""]
    out += ["## Leaderboard", ""]
    if board.height:
        shown = board.with_columns(model_label(board))   # a submitted system says so beside its name
        columns = [c for c in ("metric", "eval_lm", "rank", "rank_low", "rank_high", "model", "mean", "ci_low",
                               "ci_high", "n_papers", "n_missing", "n_excluded") if c in shown.columns]
        out.append(markdown_table(shown, columns))
        if "kind" in board.columns and (board["kind"] == "submitted").any():
            out += ["", "*(submitted)*: reviews a system's authors submitted (`grebench submit`), not generated "
                    "by the pipeline."]
    else:
        out.append("No scores yet.")
    out += pairwise_markdown(frames)
    out += ["", "## Metric validation", ""]
    if validation.height:
        out.append(markdown_table(validation, ["metric", "strategy", "kind", "level", "n", "mean_change", "smd", "ci_low",
                                               "ci_high", "boot_low", "boot_high", "p_value", "p_adjusted",
                                               "verdict", "passed", "reason"]))
        failing = validation.filter(pl.col("passed").not_()).group_by("metric", maintain_order=True).agg("strategy")
        out += ["", "### Metrics that fail any test", ""]
        out += [f"- {m}: {', '.join(s)}" for m, s in failing.iter_rows()] or ["None."]
        out += ["", "### Failures per metric (degradations without a significant drop, manipulations with a "
                "significant rise; failed / tested)", ""]
        out.append(failures_markdown(validation))
    else:
        out.append("No validation results yet.")
    out += ["", "## Correlation with human quality scores", ""]
    out.append(markdown_table(correlation, ["metric", "eval_lm", "n", "rho", "p_value", "reason"])
               if correlation.height else "No human quality scores in this data.")
    confound = frames.get("length_confound", pl.DataFrame())
    if confound.height:
        out += ["", "## Length confound (Spearman of score with candidate length in words)", ""]
        out.append(markdown_table(confound, ["metric", "n", "rho", "p_value", "mean_words", "reason"]))
    return "\n".join(out) + "\n"


def pairwise_markdown(frames: Mapping[str, Any]) -> list[str]:
    """The pairwise judge's board (win rate with its Wilson interval) and its positional bias, when it ran."""
    board, bias = frames.get("pairwise_board", pl.DataFrame()), frames.get("pairwise_bias", pl.DataFrame())
    if not board.height and not bias.height:
        return []
    out = ["", "## Pairwise judge", "",
           "Each order of each judged pair is one game (a tie half a win); 95% Wilson interval on the win rate. "
           "Positional bias: the share of pairs answered in both orders whose verdict flips with the order, and "
           "the share of decided verdicts that went to the review shown first.", ""]
    if board.height:
        out.append(markdown_table(board, ["judge", "model", "games", "wins", "win_rate", "ci_low", "ci_high"]))
    if bias.height:
        out += ["", markdown_table(bias, ["judge", "pairs", "answered_both", "flipped", "flip_rate", "decided",
                                          "first_position_share", "reason"])]
    return out


def write_report(source: Path | str | Mapping[str, pl.DataFrame], out_dir: Path | str,
                 benchmarks: pl.DataFrame | None = None) -> dict[str, Path]:
    """Write leaderboard.png, validation.png and report.md into `out_dir`; their paths by name. With
    `benchmarks` (model, benchmark, score: tasks/report/benchmarks.py), report.md also sets the leaderboard
    beside them (Spearman per metric and benchmark) and benchmark_size.png draws its scores against size."""
    frames: dict[str, Any] = read_tables(Path(source), TABLES) if isinstance(source, str | Path) else dict(source)
    if isinstance(source, str | Path):
        from tasks.core.locks import built_for

        frames["_pipeline"] = built_for(Path(source))   # the report says whose results it shows
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    empty = pl.DataFrame()
    figures = {
        "leaderboard": plot_leaderboard(frames.get("leaderboard", empty), out / "leaderboard.png"),
        "validation": plot_validation(frames.get("validation", empty), out / "validation.png"),
    }
    # focus.png and rating_relation.png when the review-quality marts exist
    from tasks.report import review_quality as quality

    figures |= quality.figures(frames, out)
    from tasks.report import trust

    cost = trust.plot_cost_quality(trust.cost_quality(frames.get("leaderboard", empty),
                                                      frames.get("candidate_costs", empty)), out / "cost_quality.png")
    figures |= {"cost_quality": cost} if cost is not None else {}
    summary = out / "report.md"
    section = quality.markdown(frames) + trust.trust_markdown(frames)
    if benchmarks is not None:
        from tasks.report.benchmarks import Comparison, plot_size

        comparison = Comparison(frames.get("leaderboard", empty), benchmarks)
        size = plot_size(comparison.points, out / "benchmark_size.png", "GRE-bench score against parameter size")
        figures |= {"benchmark_size": size} if size is not None else {}
        section += comparison.markdown(size)
    summary.write_text(markdown(frames, figures) + ("\n".join(section) + "\n" if section else ""), encoding="utf-8")
    return {**figures, "summary": summary}
