"""The overview a reader sees first: one row per model, one column per headline metric.

Read from the `overview` table (sql/marts/overview.sql), which both the site's index and `grebench report`'s
markdown open with, so `grebench query "select * from overview"` and the pages show one source. A metric
column holds a struct per model (mean, interval, rank, and the metric's validation status at the level the
board reads); the columns come in the order of `[score] headline` (each cell's `position`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import polars as pl

from tasks.core.layout import slug
from tasks.report.common import markdown_rows

BESIDE = ("model", "is_human", "kind", "papers_scored", "usd_per_review", "tokens_per_review")


@dataclass(frozen=True)
class Column:
    """One headline metric's column: its heading, its board and its validation status."""

    heading: str
    metric: str
    eval_lm: str | None
    tests_run: int
    tests_passed: int
    tests_failed: int
    tests_inconclusive: int
    levels: str | None
    board_level: str | None = None

    @property
    def status(self) -> str:
        """"2 of 3 tests passed (1 inconclusive)" at the levels counted; "not validated" without a test."""
        if not self.tests_run:
            return "not validated"
        inconclusive = f", {self.tests_inconclusive} inconclusive" if self.tests_inconclusive else ""
        failed = f", {self.tests_failed} failed" if self.tests_failed else ""
        return f"{self.tests_passed} of {self.tests_run} tests passed{failed}{inconclusive}"

    @property
    def verdict(self) -> str:
        """pass (every test run passed), fail (any failed), inconclusive (none failed, not all passed) or none."""
        if not self.tests_run:
            return "none"
        if self.tests_failed:
            return "fail"
        return "pass" if self.tests_passed == self.tests_run else "inconclusive"

    @property
    def board(self) -> str:
        """The anchor of this metric's board on the leaderboard page."""
        return slug(f"{self.metric}-{self.eval_lm}")

    @property
    def grid(self) -> str:
        """The anchor of the validation grid of the level the board reads, where the status counts tests at it;
        else of the first level it counts."""
        levels = (self.levels or "none").split(", ")
        return f"grid-{slug(self.board_level if self.board_level in levels else levels[0])}"


def columns(overview: pl.DataFrame) -> list[Column]:
    """The metric columns of the `overview` table, in the order of [score] headline."""
    found = []
    for name in overview.columns:
        if name in BESIDE:
            continue
        cell = next((c for c in overview[name].to_list() if c is not None), None)
        if cell is None:
            continue
        found.append((cell["position"], name, Column(name, cell["metric"], cell["eval_lm"], cell["tests_run"],
                                                     cell["tests_passed"], cell["tests_failed"],
                                                     cell["tests_inconclusive"], cell["levels"],
                                                     cell.get("board_level"))))
    return [column for _, _, column in sorted(found, key=lambda f: (f[0], f[1]))]


def finite(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def cell_text(cell: dict[str, Any] | None) -> str:
    """"0.512 [0.480, 0.550] #1": the mean, its interval and its rank; "–" where the model has no value."""
    mean = finite(cell["mean"]) if cell else None
    if mean is None:
        return "–"
    low, high = finite(cell["ci_low"]), finite(cell["ci_high"])
    interval = f" [{low:.3f}, {high:.3f}]" if low is not None and high is not None else ""
    rank = f" #{cell['rank']}" if cell.get("rank") is not None else ""
    return f"{mean:.3f}{interval}{rank}"


def rows(overview: pl.DataFrame, heads: list[Column]) -> list[dict[str, Any]]:
    """Per model (human baseline first): its cells in the columns' order, papers scored and cost per review."""
    out = []
    for row in overview.iter_rows(named=True):
        out.append({**{k: row.get(k) for k in BESIDE},
                    "cells": [{**(row[c.heading] or {}), "text": cell_text(row[c.heading]),
                               "sort": finite((row[c.heading] or {}).get("mean"))} for c in heads]})
    return out


def cost_text(row: dict[str, Any]) -> str:
    if row["is_human"]:
        return "–"
    usd = finite(row.get("usd_per_review"))
    return "unknown" if usd is None else f"{usd:.4f}"


def markdown(overview: pl.DataFrame) -> list[str]:
    """The overview as the report's first section: one line per model, a column per headline metric headed
    by its validation status."""
    heads = columns(overview)
    if not overview.height or not heads:
        return ["## Overview", "", "No headline metric scored yet ([score] headline names them).", ""]
    header = ["model", *(f"{c.heading} ({c.status}; {c.levels or 'no'} level)" for c in heads),
              "papers scored", "USD / review"]
    body = [[f"{r['model']}{' (human baseline)' if r['is_human'] else ''}", *(c["text"] for c in r["cells"]),
             str(r["papers_scored"] if r["papers_scored"] is not None else "–"), cost_text(r)]
            for r in rows(overview, heads)]
    return ["## Overview", "",
            "Each headline metric's mean over papers with its interval and the model's rank (#); each column "
            "headed by the metric's validation tests at the level its board reads (`overview` table).", "",
            markdown_rows(header, body), ""]
