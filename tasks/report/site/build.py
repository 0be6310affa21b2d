"""Render the site: read the marts, draw the charts, fill the templates, write the files.

    index.html          the overview first (a model per row, a headline metric per column headed by its
                        validation status: the `overview` table), then what is here, the papers by year
    leaderboard.html    per metric and evaluation LM, grouped by family (GEM's first, each folding): chart
                        (mean, CI, human band) and a sortable table; a board without a value: one line, its reason
    validation.html     pass / fail per metric and strategy (SMD, CI and p on hover), human correlation
    papers/<id>.html    title, abstract, human reviews and their judgments, candidates, per-pair scores
                        (an id that is not a safe file name: its slug and a hash, `page_name`)
    runs.html           every pipeline run, stage by stage
    releases.html       the releases, newest first, each with what changed since the one before
    submissions.html    submitted candidates (`grebench submit`): counts and rejected rows by reason
    charts/*.svg        the leaderboard charts (static SVG, shown with <img>)

Every text from OpenReview or a model goes through Jinja2's autoescaping: a review holding
`<script>` shows as text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
import polars as pl

from tasks.core.layout import safe_name, slug
from tasks.report import overview
from tasks.report.common import read_tables
from tasks.report.families import family_of, family_slug, order
from tasks.report.site.charts import cost_quality_chart, leaderboard_chart, to_svg
from tasks.report.site.data import TABLES, model_costs, paper_bundle, rows, site_papers, year_of
from tasks.report.trust import cost_axis, cost_quality

TEMPLATES = Path(__file__).parent / "templates"


@dataclass(frozen=True)
class SiteResult:
    out_dir: Path
    pages: list[Path] = field(default_factory=list)
    charts: list[Path] = field(default_factory=list)

    @property
    def index(self) -> Path:
        return self.out_dir / "index.html"


def number(value: object, digits: int = 3) -> str:
    """Numbers for people: 3 significant decimals, small values in scientific notation, NaN as a dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.2e}" if value and abs(value) < 10 ** -digits else f"{value:.{digits}f}"
    return str(value)


def page_name(paper_id: str) -> str:
    """The file name of a paper's page: its id, or where the id is not a safe file name, its slug and a
    hash of the id (tasks/core/layout.py `safe_name`, as ingest names the paper's PDF)."""
    return safe_name(paper_id)


def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["num"] = number
    env.filters["slug"] = slug
    env.filters["sortkey"] = lambda v: "" if v is None or (isinstance(v, float) and math.isnan(v)) else v
    return env


def leaderboard_groups(board: pl.DataFrame) -> list[dict[str, Any]]:
    """One board per (metric, evaluation LM), each with its family (tasks/report/families.py) and, where no
    model has a value, `empty`: the one line that stands in for its chart (the rows' reasons)."""
    if board.is_empty():
        return []
    groups = []
    for (metric, lm), group in board.sort("metric", "eval_lm").group_by("metric", "eval_lm", maintain_order=True):
        entries = rows(group.sort("rank", "model", nulls_last=True))
        confidence = next((r["confidence"] for r in entries if r["confidence"] is not None), None)
        valued = [r for r in entries if not r["is_human"] and r["mean"] is not None]
        reasons = sorted({str(r["reason"]) for r in entries if r.get("reason")})
        groups.append({"metric": metric, "eval_lm": lm, "rows": entries, "slug": slug(f"{metric}-{lm}"),
                       "family": family_of(str(metric)),
                       "level": f"{100 * confidence:.0f}%" if confidence else "CI",
                       "predictor": next((r.get("predictor") for r in entries if r.get("predictor")), None),
                       "not_qualified": any(r.get("qualified") is False for r in entries),
                       "empty": None if valued else "; ".join(reasons) or "no model has a value",
                       "human": next((r["mean"] for r in entries if r["is_human"]), None)})
    return groups


def by_family(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The boards grouped by family in page order (GEM's first), each family with its boards that have values
    and those without; the first family is open, the others folded."""
    families = []
    for name in order():
        boards = [g for g in groups if g["family"] == name]
        if boards:
            families.append({"name": name, "slug": family_slug(name), "groups": boards, "open": not families,
                             "empty": sum(1 for g in boards if g["empty"])})
    return families


def cost_figure(board: pl.DataFrame, costs: pl.DataFrame, out_dir: Path, result: SiteResult) -> dict[str, Any] | None:
    """charts/cost-quality.svg (each model's mean against its cost per review) and what the page says
    under it: the metric, the cost axis and the models of unknown cost (named, not drawn)."""
    frame = cost_quality(board, costs)
    if not frame.height:
        return None
    axis, known, unknown = cost_axis(frame)
    if not known.height:
        return {"chart": None, "unknown": unknown, "metric": frame["metric"].drop_nulls().first(), "axis": axis}
    metric = str(frame["metric"].drop_nulls().first())
    chart = out_dir / "charts" / "cost-quality.svg"
    chart.write_text(to_svg(cost_quality_chart(rows(known), axis, metric)), encoding="utf-8")
    result.charts.append(chart)
    return {"chart": f"charts/{chart.name}", "unknown": unknown, "metric": metric, "axis": axis}


def validation_matrix(validation: pl.DataFrame) -> list[dict[str, Any]]:
    """One matrix per (level, evaluation LM): metrics x strategies, each cell a verdict, and per metric
    how many degradations and manipulations it fails (the shape of the Scoring Rules paper's tables 4-5)."""
    if validation.is_empty():
        return []
    frame = validation
    for column in ("level", "eval_lm", "verdict", "perturber"):
        if column not in frame.columns:
            frame = frame.with_columns(pl.lit(None, pl.String).alias(column))
    frame = frame.with_columns(pl.col("verdict").fill_null(
        pl.when(pl.col("passed").is_null()).then(pl.lit("inconclusive"))
        .when(pl.col("passed")).then(pl.lit("pass")).otherwise(pl.lit("fail"))))
    matrices = []
    for (level, lm), group in frame.sort("level", "eval_lm", nulls_last=True).group_by(
            "level", "eval_lm", maintain_order=True):
        strategies = rows(group.select("strategy", "kind").unique(maintain_order=True).sort("kind", "strategy"))
        cells = {(r["metric"], r["strategy"]): r for r in rows(group)}
        metrics = sorted(set(group["metric"].to_list()))
        fails = {m: {kind: sum(1 for (metric, _), c in cells.items() if metric == m and c["kind"] == kind
                               and c["verdict"] == "fail")
                     for kind in ("degradation", "manipulation")} for m in metrics}
        totals = {kind: sum(1 for s in strategies if s["kind"] == kind) for kind in ("degradation", "manipulation")}
        matrices.append({"level": level or "judgments", "eval_lm": lm or "–", "metrics": metrics,
                         "strategies": strategies, "cells": cells, "fails": fails, "totals": totals})
    return matrices


def quality_bundle(tables: dict[str, pl.DataFrame]) -> dict[str, Any]:
    """The judges' exam (one row per model, role and test) and Beyond Rating's review quality per model
    (points metrics, rating outcomes), with the number of atomic points per model and field."""
    exam = tables["qualification"]
    quality = tables["review_quality_models"]
    points = tables["points"]
    counts = (points.group_by("source", "field").len().sort("source", "field") if points.height else points)
    return {"exam": rows(exam.sort("role", "model", "test")) if exam.height else [],
            "quality": rows(quality.sort("metric", "model")) if quality.height else [],
            "points": rows(counts) if counts.height else []}


def run_groups(runs: pl.DataFrame) -> list[dict[str, Any]]:
    if runs.is_empty():
        return []
    out = []
    for (run_id,), stages in runs.sort("started_at").group_by("run_id", maintain_order=True):
        first = stages.row(0, named=True)
        out.append({"run_id": run_id, "pipeline": first["pipeline"], "config_hash": first["config_hash"],
                    "code_version": first["code_version"], "started_at": stages["started_at"].min(),
                    "ended_at": stages["ended_at"].max(), "llm_calls": stages["llm_calls"].sum(),
                    "cost_usd": stages["cost_usd"].sum(), "duration_s": stages["duration_s"].sum(),
                    "failed": stages.filter(pl.col("status") != "completed").height,
                    "stages": rows(stages.sort("position"))})
    return list(reversed(out))      # newest first


def release_context(tables: dict[str, pl.DataFrame]) -> dict[str, Any]:
    """The releases newest first, each with its models (in the order they came) and changelog rows."""
    changes: dict[str, list[dict[str, Any]]] = {}
    for row in rows(tables["release_changes"]):
        changes.setdefault(str(row["release_id"]), []).append(row)
    models: dict[str, list[str]] = {}
    if "model" in tables["release_models"].columns:
        for row in rows(tables["release_models"].sort("added_at", "model")):
            models.setdefault(str(row["release_id"]), []).append(str(row["model"]))
    releases = [{**r, "models": models.get(str(r["release_id"]), [])}
                for r in rows(tables["releases"].sort("created_at", "release_id", descending=True))]
    return {"releases": releases, "changelog": changes}


def submission_context(tables: dict[str, pl.DataFrame]) -> dict[str, Any]:
    """The submissions and, per submission, its rejected rows grouped by rule."""
    rejects = tables["rejects"]
    by_name: dict[str, dict[str, list[dict[str, Any]]]] = {}
    if rejects.height:
        for row in rows(rejects.filter(pl.col("stage") == "submit").sort("rule", "entity_id")):
            name = str(row["entity_id"]).rsplit("#", 1)[0]
            by_name.setdefault(name, {}).setdefault(str(row["rule"]), []).append(row)
    return {"submissions": rows(tables["submissions"].sort("name")), "rejects": by_name}


def benchmark_context(board: pl.DataFrame, benchmarks: pl.DataFrame | None, out_dir: Path,
                      result: SiteResult) -> dict[str, Any] | None:
    """The leaderboard page's agreement with other benchmarks (tasks/report/benchmarks.py): the correlation
    rows, the names on one side only, and charts/benchmark-size.svg when the file gives sizes."""
    if benchmarks is None:
        return None
    from tasks.report.benchmarks import Comparison, plot_size

    comparison = Comparison(board, benchmarks)
    chart = plot_size(comparison.points, out_dir / "charts" / "benchmark-size.svg",
                      "GRE-bench score against parameter size")
    if chart is not None:
        result.charts.append(chart)
    return {"rows": rows(comparison.table), "interval": comparison.interval, "board_only": comparison.board_only,
            "file_only": comparison.file_only, "chart": f"charts/{chart.name}" if chart else None}


def build_site(database: Path, out_dir: Path, benchmarks: pl.DataFrame | None = None) -> SiteResult:
    """Write the whole site into out_dir (overwriting the pages it writes) and say what was written; with
    `benchmarks` (model, benchmark, score) the leaderboard page sets the boards beside them."""
    tables = read_tables(database, TABLES)
    env = environment()
    out_dir = Path(out_dir)
    (out_dir / "papers").mkdir(parents=True, exist_ok=True)
    (out_dir / "charts").mkdir(parents=True, exist_ok=True)
    result = SiteResult(out_dir)
    from tasks.core.locks import built_for

    common = {"generated_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "database": Path(database).name,
              "pipeline": built_for(Path(database)) or "unknown",
              "has_releases": tables["releases"].height > 0, "has_submissions": tables["submissions"].height > 0}

    def page(template: str, path: Path, root: str = "", **context: Any) -> None:
        path.write_text(env.get_template(template).render(root=root, **common, **context), encoding="utf-8")
        result.pages.append(path)

    groups = leaderboard_groups(tables["leaderboard"])
    costs = model_costs(tables["candidates"])
    for group in groups:
        for row in group["rows"]:
            row.update(costs.get(str(row["model"]), {}))
        if group["empty"]:
            continue     # one line with its reason on the page, no chart
        chart = out_dir / "charts" / f"leaderboard-{group['slug']}.svg"
        title = f"{group['metric']} ({group['eval_lm']}; {group['level']} CI)"
        chart.write_text(to_svg(leaderboard_chart(group["rows"], title)), encoding="utf-8")
        result.charts.append(chart)
        group["chart"] = f"charts/{chart.name}"
    board = tables["leaderboard"]
    release_ids = sorted(set(board["release_id"].drop_nulls().to_list())) if "release_id" in board.columns else []
    injection = tables["injection_shifts"]
    page("leaderboard.html", out_dir / "leaderboard.html", families=by_family(groups),
         releases=release_ids,
         injection=rows(injection.sort("model", "variant", "measure")) if injection.height else [],
         cost=cost_figure(board, tables["candidate_costs"], out_dir, result),
         benchmarks=benchmark_context(board, benchmarks, out_dir, result))
    if common["has_releases"]:
        page("releases.html", out_dir / "releases.html", **release_context(tables))
    if common["has_submissions"]:
        page("submissions.html", out_dir / "submissions.html", **submission_context(tables))

    page("validation.html", out_dir / "validation.html", matrices=validation_matrix(tables["validation"]),
         correlation=rows(tables["human_correlation"]), data=rows(tables["validation_data"]))

    papers = rows(site_papers(tables))
    for paper in papers:
        paper["page"] = f"papers/{page_name(str(paper['paper_id']))}.html"
        page("paper.html", out_dir / paper["page"], root="../", **paper_bundle(tables, paper))

    runs = run_groups(tables["runs"])
    page("runs.html", out_dir / "runs.html", runs=runs)

    page("quality.html", out_dir / "quality.html", **quality_bundle(tables))

    years: dict[str, list[dict[str, Any]]] = {}
    for paper in papers:
        years.setdefault(year_of(str(paper.get("venue_id"))), []).append(paper)
    counts = {name: frame.height for name, frame in tables.items()}
    models = sorted(set(tables["candidates"]["model"].to_list())) if tables["candidates"].height else []
    heads = overview.columns(tables["overview"])
    page("index.html", out_dir / "index.html", years=dict(sorted(years.items(), reverse=True)),
         counts=counts, models=models, latest=runs[0] if runs else None, groups=groups,
         overview={"columns": heads, "rows": overview.rows(tables["overview"], heads)})
    return result
