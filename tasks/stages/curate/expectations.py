"""great-expectations checks of a venue's curated tables; a failure is a readable report.

The tables go to GE as small pandas frames holding only the columns a check reads (ids, ratings,
counts, the stripped length of the review text): the review text itself never leaves polars. One
ephemeral GE context is built per process and reused; importing GE costs ~4 s once, a
validation afterwards ~0.1 s.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import polars as pl

from tasks.core.config import Config
from tasks.core.errors import CurationValidationError

EXAMPLES = 5       # failing values quoted per expectation
_LOCK = threading.Lock()


@dataclass(frozen=True)
class Check:
    table: str            # a key of the frames passed to `run_checks`
    index: str            # the column that names a failing row in the report
    what: str             # the property, in words
    expectation: Any      # a great_expectations expectation


@cache
def _context() -> Any:
    """The process's ephemeral GE context: no files, no analytics, no progress bars."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),
    )
    context = gx.get_context(mode="ephemeral", project_config=config)
    context.data_sources.add_pandas("curated")
    return context


def _batch(table: str, frame: pl.DataFrame) -> Any:
    source = _context().data_sources.get("curated")
    try:
        asset = source.get_asset(table)
    except LookupError:
        asset = source.add_dataframe_asset(table)
        asset.add_batch_definition_whole_dataframe("whole")
    definition = asset.get_batch_definition("whole")
    return definition.get_batch(batch_parameters={"dataframe": frame.to_pandas()})


def _describe(check: Check, result: Any) -> str:
    config = result.expectation_config
    kwargs = {k: v for k, v in config.kwargs.items() if k != "batch_id"}
    if isinstance(kwargs.get("value_set"), list) and len(kwargs["value_set"]) > 10:
        kwargs["value_set"] = f"<{len(kwargs['value_set'])} values>"
    args = ", ".join(f"{k}={v}" for k, v in kwargs.items())
    outcome = result.result or {}
    line = f"- {check.table}: {check.what}\n    {config.type}({args})"
    if "unexpected_count" in outcome:
        line += f"\n    {outcome['unexpected_count']} of {outcome.get('element_count')} rows fail"
        examples = outcome.get("partial_unexpected_index_list") or [
            {"value": v} for v in outcome.get("partial_unexpected_list", [])
        ]
        if examples:
            shown = "; ".join(
                ", ".join(f"{k}={_plain(v)}" for k, v in example.items()) for example in examples[:EXAMPLES]
            )
            line += f", e.g. {shown}"
    elif "observed_value" in outcome:
        line += f"\n    observed {outcome['observed_value']}"
    if result.exception_info and result.exception_info.get("raised_exception"):
        line += f"\n    error: {result.exception_info.get('exception_message')}"
    return line


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def run_checks(frames: dict[str, pl.DataFrame], checks: list[Check], title: str) -> None:
    """Validate each frame with its checks; raise CurationValidationError listing the failures."""
    import great_expectations as gx

    failures = []
    with _LOCK:
        _context()  # suites resolve the active context when expectations are added
        for table, frame in frames.items():
            mine = [c for c in checks if c.table == table]
            if not mine:
                continue
            suite = gx.ExpectationSuite(name=f"curated-{table}")
            for check in mine:
                suite.add_expectation(check.expectation)
            result_format = {"result_format": "SUMMARY", "unexpected_index_column_names": [mine[0].index],
                             "partial_unexpected_count": EXAMPLES}
            outcome = _batch(table, frame).validate(suite, result_format=result_format)
            for check, result in zip(mine, outcome.results, strict=True):
                if not result.success:
                    failures.append(_describe(check, result))
    if failures:
        raise CurationValidationError(f"{title}: {len(failures)} expectation(s) failed\n" + "\n".join(failures))


def _row_count(path: Path) -> int:
    return pl.scan_parquet(path).select(pl.len()).collect().item() if path.is_file() else 0


def curated_frames(out_dir: Path, ingest_dir: Path) -> dict[str, pl.DataFrame]:
    """The narrow frames the checks read, built from the curated and ingested Parquet files."""
    papers = pl.read_parquet(out_dir / "papers.parquet", columns=["paper_id", "status", "n_reviews", "rating_var"])
    reviews = pl.scan_parquet(out_dir / "reviews.parquet").select(
        "review_id", "paper_id", "rating", "confidence",
        review_text_chars=pl.col("review_text").str.strip_chars().str.len_chars().fill_null(0),
    ).collect()
    reviews = reviews.with_columns(paper_is_kept=pl.col("paper_id").is_in(papers["paper_id"].implode()).fill_null(False))
    rejects = pl.read_parquet(out_dir / "rejects.parquet", columns=["stage", "entity", "entity_id", "rule"])
    report = pl.read_parquet(out_dir / "curation_report.parquet").sort("step")
    ingested = {"paper": _row_count(ingest_dir / "papers.parquet"),
                "review": _row_count(ingest_dir / "reviews.parquet")}
    kept = {"paper": papers.height, "review": reviews.height}
    rejected = rejects.group_by("entity").len()
    rejected_by = dict(zip(rejected["entity"], rejected["len"], strict=True))
    chain = report.with_columns(
        previous_rows_out=pl.col("rows_out").shift(1).over("entity"),
    ).with_columns(
        previous_rows_out=pl.col("previous_rows_out").fill_null(
            pl.col("entity").replace_strict(ingested, return_dtype=pl.Int64)
        )
    )
    final = chain.group_by("entity").agg(pl.col("rows_out").last())
    final_by = dict(zip(final["entity"], final["rows_out"], strict=True))
    counts = pl.DataFrame(
        {
            "entity": ["paper", "review"],
            "ingested": [ingested["paper"], ingested["review"]],
            "kept": [kept["paper"], kept["review"]],
            "kept_plus_rejected": [kept[e] + rejected_by.get(e, 0) for e in ("paper", "review")],
            "report_rows_out": [final_by.get(e, ingested[e]) for e in ("paper", "review")],
        }
    )
    per_paper = papers.select("paper_id", "n_reviews").join(
        reviews.group_by("paper_id").agg(n_actual=pl.len().cast(pl.Int32)), on="paper_id", how="left"
    ).with_columns(pl.col("n_actual").fill_null(0))
    return {"papers": papers, "reviews": reviews, "per_paper": per_paper, "rejects": rejects,
            "report": chain.select("step", "entity", "rule", "rows_in", "rows_out", "previous_rows_out"),
            "counts": counts}


def curation_checks(cfg: Config) -> list[Check]:
    import great_expectations.expectations as gxe

    curate = cfg.curate
    low, high = curate.confidence_range
    scale = [float(v) for v in curate.common_scale]
    n_min, n_max = curate.min_reviews, curate.max_reviews
    return [
        Check("papers", "paper_id", "paper ids are present", gxe.ExpectColumnValuesToNotBeNull(column="paper_id")),
        Check("papers", "paper_id", "paper ids are unique", gxe.ExpectColumnValuesToBeUnique(column="paper_id")),
        Check("papers", "paper_id", "kept papers are active",
              gxe.ExpectColumnValuesToBeInSet(column="status", value_set=["active"])),
        Check("papers", "paper_id", f"review count in [{n_min}, {n_max}]",
              gxe.ExpectColumnValuesToBeBetween(column="n_reviews", min_value=n_min, max_value=n_max)),
        Check("papers", "paper_id", f"rating variance <= {curate.max_rating_variance:g}",
              gxe.ExpectColumnValuesToBeBetween(column="rating_var", max_value=curate.max_rating_variance + 1e-9)),
        Check("reviews", "review_id", "review ids are present",
              gxe.ExpectColumnValuesToNotBeNull(column="review_id")),
        Check("reviews", "review_id", "review ids are unique", gxe.ExpectColumnValuesToBeUnique(column="review_id")),
        Check("reviews", "review_id", "every rating is present", gxe.ExpectColumnValuesToNotBeNull(column="rating")),
        Check("reviews", "review_id", f"ratings on the common scale [{', '.join(f'{v:g}' for v in scale)}]",
              gxe.ExpectColumnValuesToBeInSet(column="rating", value_set=scale)),
        Check("reviews", "review_id", "every confidence is present",
              gxe.ExpectColumnValuesToNotBeNull(column="confidence")),
        Check("reviews", "review_id", f"confidence in [{low:g}, {high:g}] and >= min_confidence {curate.min_confidence:g}",
              gxe.ExpectColumnValuesToBeBetween(column="confidence", min_value=max(low, curate.min_confidence),
                                                max_value=high)),
        Check("reviews", "review_id", "review_text is not empty",
              gxe.ExpectColumnValuesToBeBetween(column="review_text_chars", min_value=1)),
        Check("reviews", "review_id", "every review belongs to a kept paper",
              gxe.ExpectColumnValuesToBeInSet(column="paper_is_kept", value_set=[True])),
        Check("per_paper", "paper_id", f"each kept paper has {n_min}..{n_max} kept reviews",
              gxe.ExpectColumnValuesToBeBetween(column="n_actual", min_value=n_min, max_value=n_max)),
        Check("per_paper", "paper_id", "papers.n_reviews matches the reviews table",
              gxe.ExpectColumnPairValuesToBeEqual(column_A="n_reviews", column_B="n_actual")),
        Check("rejects", "entity_id", "rejects come from the curate stage",
              gxe.ExpectColumnValuesToBeInSet(column="stage", value_set=["curate"])),
        Check("rejects", "entity_id", "every reject names its rule", gxe.ExpectColumnValuesToNotBeNull(column="rule")),
        Check("report", "step", "each step starts where the previous one ended",
              gxe.ExpectColumnPairValuesToBeEqual(column_A="rows_in", column_B="previous_rows_out")),
        Check("counts", "entity", "kept + rejected = ingested",
              gxe.ExpectColumnPairValuesToBeEqual(column_A="ingested", column_B="kept_plus_rejected")),
        Check("counts", "entity", "the curation report ends at the kept count",
              gxe.ExpectColumnPairValuesToBeEqual(column_A="kept", column_B="report_rows_out")),
    ]


def validate_curated_apart(out_dir: Path, ingest_dir: Path, cfg: Config) -> None:
    """`validate_curated` in the worker process of tasks/core/children.py `apart`: great-expectations is never
    imported by the run itself, whose later stages would otherwise carry its 0.24 GB under their peaks. A failed
    check comes back as the same CurationValidationError; a worker that dies (killed, out of memory) is a
    TransientError (a rerun checks again: nothing was written yet)."""
    from tasks.core.children import call_apart

    call_apart(f"the checks of the curated tables in {out_dir}", validate_curated, Path(out_dir), Path(ingest_dir), cfg)


def validate_curated(out_dir: Path, ingest_dir: Path, cfg: Config) -> None:
    """Check the curated tables in `out_dir` against `ingest_dir`; raise CurationValidationError."""
    out_dir, ingest_dir = Path(out_dir), Path(ingest_dir)
    frames = curated_frames(out_dir, ingest_dir)
    run_checks(frames, curation_checks(cfg), f"curated tables in {out_dir}")
