"""The review-quality part of `grebench report` (tasks/report/validation.py): two figures and a section.

    focus.png           the eight-category focus of strengths, weaknesses and questions: the share of
                        points per category, humans next to each candidate model (Beyond Rating fig. 4)
    rating_relation.png each review-quality metric's model means against the models' rating MAE, with
                        Pearson r across the candidate models (Beyond Rating fig. 3)

Both read the marts `focus_categories`, `review_quality_models` and `rating_relation`; with none
of them built the report has neither figure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import polars as pl

from tasks.metrics.review_quality.formulas import CATEGORIES
from tasks.report.common import markdown_table, pyplot

TABLES = ("focus_categories", "review_quality_models", "rating_relation")
FIELDS = ("strengths", "weaknesses", "questions")


def plot_focus(focus: pl.DataFrame, path: Path) -> Path:
    """One panel per field: grouped bars of category shares, one bar per model (humans first)."""
    plt = pyplot()
    fields = [f for f in FIELDS if f in set(focus["field"])]
    fig, axes = plt.subplots(len(fields), 1, figsize=(9, 3.2 * len(fields)), squeeze=False)
    for ax, name in zip(axes.flat, fields, strict=True):
        part = focus.filter(pl.col("field") == name)
        models = sorted(set(part["model"]), key=lambda m: (m != "human", m))
        width = 0.8 / len(models)
        for i, model in enumerate(models):
            share = dict(part.filter(pl.col("model") == model).select("category", "share").iter_rows())
            ax.bar([c + i * width for c in range(len(CATEGORIES))], [share.get(c, 0.0) for c in CATEGORIES],
                   width, label=model, color="grey" if model == "human" else None)
        ax.set_xticks([c + 0.4 - width / 2 for c in range(len(CATEGORIES))], CATEGORIES, fontsize=8)
        ax.set_title(f"{name}: share of points per category")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_relation(models: pl.DataFrame, relation: pl.DataFrame, path: Path) -> Path:
    """One scatter per metric: candidate models' means against their rating MAE, r in the title."""
    plt = pyplot()
    cand = models.filter(~pl.col("is_human"))
    mae = dict(cand.filter(pl.col("metric") == "rating_mae").select("model", "mean").iter_rows())
    r = dict(relation.select("metric", "pearson_r").iter_rows()) if relation.height else {}
    metrics = sorted(m for m in set(cand["metric"]) if m != "rating_mae")
    cols = max(1, min(3, len(metrics)))
    rows = max(1, math.ceil(len(metrics) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax in axes.flat[len(metrics):]:
        ax.axis("off")
    for ax, metric in zip(axes.flat, metrics, strict=False):
        pts = [(v, mae[m], m) for m, v in cand.filter(pl.col("metric") == metric).select("model", "mean").iter_rows()
               if m in mae and v is not None and mae[m] is not None]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts])
        for x, y, m in pts:
            ax.annotate(m, (x, y), fontsize=7)
        value = r.get(metric)
        ax.set_title(f"{metric}\nr = {'n/a' if value is None or value != value else f'{value:.2f}'}", fontsize=9)
        ax.set_xlabel(metric, fontsize=8)
        ax.set_ylabel("rating MAE", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def figures(frames: Mapping[str, pl.DataFrame], out: Path) -> dict[str, Path]:
    got: dict[str, Path] = {}
    focus = frames.get("focus_categories", pl.DataFrame())
    if focus.height:
        got["focus"] = plot_focus(focus, out / "focus.png")
    models = frames.get("review_quality_models", pl.DataFrame())
    if models.height and "rating_mae" in set(models["metric"]):
        got["rating_relation"] = plot_relation(models, frames.get("rating_relation", pl.DataFrame()),
                                               out / "rating_relation.png")
    return got


def markdown(frames: Mapping[str, pl.DataFrame]) -> list[str]:
    models, relation = frames.get("review_quality_models", pl.DataFrame()), frames.get("rating_relation", pl.DataFrame())
    if not models.height:
        return []
    out = ["", "## Review quality and rating outcomes (Beyond Rating)", ""]
    out.append(markdown_table(models, ["metric", "model", "is_human", "mean", "n_papers", "n_missing"]))
    if relation.height:
        out += ["", "### Each metric against rating MAE across candidate models (Pearson r)", ""]
        out.append(markdown_table(relation, ["metric", "n_models", "pearson_r"]))
    return out
