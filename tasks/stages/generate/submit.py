"""`grebench submit`: reviews written by any system become a candidate on the leaderboard.

A submission is a file of reviews of the benchmark's papers (tasks/stages/generate/submitted_file.py) under a
name and a declared training-data cutoff. Every row of the file ends in exactly one place:

    candidates    a usable review of a benchmark paper public after the cutoff (scored)
    exclusions    a usable review of a paper public on or before the cutoff (the contamination
                  guard, tasks/contamination.py, exactly as for a generated candidate: never scored)
    rejects       stage "submit", with the rule: bad_encoding, bad_json, wrong_type, wrong_columns,
                  missing_paper_id, unknown_paper, empty_review, review_too_long, bad_rating,
                  bad_confidence, duplicate_row (an exact copy of an earlier row), duplicate_paper
                  (two different reviews of one paper: neither is kept)

so rows in = candidates + exclusions + rejects (the `submissions` table and its data test say so).
The candidates are then preprocessed into judgments with the [preprocess] LLM, as generated
reviews are, and written to

    data/<pipeline>/submit/<name>/submitted_candidates.parquet  schema.GENERATED, backend "submitted"
    data/<pipeline>/submit/<name>/candidate_judgments.parquet   schema.JUDGMENTS
    data/<pipeline>/submit/<name>/submitted_exclusions.parquet  schema.EXCLUSIONS
    data/<pipeline>/submit/<name>/rejects.parquet              schema.REJECTS (submit, preprocess)
    data/<pipeline>/submit/<name>/usage.parquet                schema.USAGE
    data/<pipeline>/submit/<name>/submission.parquet           SUBMISSIONS: one row, the counts

The folder is written beside the old one and swapped in, so a crash leaves the previous
submission whole. A name already submitted is replaced only when asked (`replace=True`).
The score stage reads these candidates next to the generated ones (tasks/core/submitted.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import re
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import polars as pl

from tasks.core import schema
from tasks.core.config import Config
from tasks.core.errors import GrebenchError
from tasks.core.frames import read_curated
from tasks.core.layout import cache_dir, write_parquet
from tasks.core.schema import EXCLUSIONS, GENERATED
from tasks.core.submitted import submit_dir
from tasks.core.summary import StageSummary, llm_figures
from tasks.metrics.judgments import PreprocessOutput, preprocess_reviews
from tasks.stages.generate.contamination import guard
from tasks.stages.generate.reviews import as_reviews, parse_review
from tasks.stages.generate.submitted_file import ReadRows, read_rows

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
RESERVED = ("human",)
SUBMISSIONS = pl.Schema({
    "name": pl.String, "pipeline": pl.String, "file": pl.String, "file_sha256": pl.String, "format": pl.String,
    "knowledge_cutoff": pl.Date, "submitted_at": pl.Datetime("ms", "UTC"), "model": pl.String,
    "rows_in": pl.Int64, "accepted": pl.Int64, "excluded": pl.Int64, "rejected": pl.Int64,
    "benchmark_papers": pl.Int64, "missing": pl.Int64, "replaced": pl.Boolean,
})


class SubmitError(GrebenchError, ValueError):
    """A submission that cannot be taken as given: one line for the user, nothing written."""


@dataclass
class Submission:
    name: str
    candidates: pl.DataFrame      # GENERATED
    exclusions: pl.DataFrame      # EXCLUSIONS
    rejects: pl.DataFrame         # REJECTS, stage submit
    meta: dict[str, Any]          # a SUBMISSIONS row


def check_name(cfg: Config, pipeline: str, name: str, replace: bool) -> bool:
    """Whether a submission of this name exists (and may be replaced); a bad name is a SubmitError."""
    if not NAME.match(name):
        raise SubmitError(f"--name {name!r}: use letters, digits, '.', '_' and '-' (starting with a letter or digit)")
    if name.lower() in RESERVED:
        raise SubmitError(f"--name {name!r} is reserved for the human baseline")
    if name in {c.name for c in cfg.generate.candidates}:
        raise SubmitError(f"--name {name!r} is a configured generate candidate; choose another name")
    exists = (submit_dir(cfg, pipeline, name) / "submission.parquet").is_file()
    if exists and not replace:
        raise SubmitError(f"a submission named {name!r} exists in pipeline {pipeline!r}; pass --replace to replace it")
    return exists


def benchmark(cfg: Config, pipeline: str) -> pl.DataFrame:
    """The benchmark papers a submission may review (the curate stage's sample)."""
    try:
        _, papers, _ = read_curated(cfg, pipeline)
    except FileNotFoundError as error:
        raise SubmitError(f"pipeline {pipeline!r} has no benchmark papers yet ({error}); run its curate stage first") \
            from None
    if papers.is_empty():
        raise SubmitError(f"pipeline {pipeline!r} has no benchmark papers; run its curate stage first")
    return papers


def check_rows(read: ReadRows, papers: pl.DataFrame, cfg: Config) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(kept rows, rejected rows) by what the values mean; every row of `read.rows` lands in one."""
    known = set(papers["paper_id"].to_list())
    scale, confidence = cfg.curate.common_scale, cfg.curate.confidence_range
    kept: list[dict[str, Any]] = []
    rejects = list(read.rejects)
    for row in read.rows:
        pid, text = (row["paper_id"] or "").strip(), row["review"] or ""
        rule = detail = ""
        if not pid:
            rule, detail = "missing_paper_id", "no paper_id"
        elif pid not in known:
            rule, detail = "unknown_paper", f"{pid[:80]!r} is not a paper of this benchmark release"
        elif not re.search(r"[^\W\d_]", text):
            rule, detail = "empty_review", "the review has no text"
        elif len(text) > cfg.generate.max_review_chars:
            rule, detail = "review_too_long", f"{len(text)} characters; at most {cfg.generate.max_review_chars}"
        elif row["rating"] is not None and not any(math.isclose(row["rating"], v) for v in scale):
            rule, detail = "bad_rating", f"rating {row['rating']:g} is not on the common scale {list(scale)}"
        elif row["confidence"] is not None and not confidence[0] <= row["confidence"] <= confidence[1]:
            rule, detail = "bad_confidence", f"confidence {row['confidence']:g} is outside {list(confidence)}"
        if rule:
            rejects.append({"row": row["row"], "paper_id": pid or None, "rule": rule, "detail": detail})
        else:
            kept.append({**row, "paper_id": pid, "review": text.strip()})
    by_paper: dict[str, list[dict[str, Any]]] = {}
    for row in kept:
        by_paper.setdefault(row["paper_id"], []).append(row)
    unique: list[dict[str, Any]] = []
    for pid, rows in by_paper.items():
        first = rows[0]
        same = all((r["review"], r["rating"], r["confidence"]) == (first["review"], first["rating"],
                                                                  first["confidence"]) for r in rows)
        if same:
            unique.append(first)
            rejects += [{"row": r["row"], "paper_id": pid, "rule": "duplicate_row",
                         "detail": f"an exact copy of row {first['row']}"} for r in rows[1:]]
        else:
            numbers = ", ".join(str(r["row"]) for r in rows)
            rejects += [{"row": r["row"], "paper_id": pid, "rule": "duplicate_paper",
                         "detail": f"different reviews of one paper in rows {numbers}; none is kept"} for r in rows]
    return sorted(unique, key=lambda r: r["row"]), sorted(rejects, key=lambda r: r["row"])


def _number(value: float | None) -> str | None:
    return None if value is None else f"{value:g}"


def build_submission(cfg: Config, pipeline: str, path: Path, name: str, cutoff: date,
                     replaced: bool = False) -> Submission:
    """Read, check and guard a file of reviews; nothing is written."""
    papers = benchmark(cfg, pipeline)
    read = read_rows(Path(path))
    kept, rejected = check_rows(read, papers, cfg)
    venues = dict(papers.select("paper_id", "venue_id").iter_rows())
    if kept:
        reviewed = papers.join(pl.DataFrame({"paper_id": [r["paper_id"] for r in kept]}), on="paper_id", how="semi")
    else:
        reviewed = papers.clear()
    eligible, exclusions = guard(reviewed, name, cutoff)
    allowed = set(eligible["paper_id"].to_list())
    rows = []
    for row in kept:
        if row["paper_id"] not in allowed:
            continue
        rows.append({
            "candidate_id": f"{name}/{row['paper_id']}", "paper_id": row["paper_id"], "venue_id": venues[row["paper_id"]],
            "model": name, "backend": "submitted", "model_id": row["model"] or name, "prompt_version": None,
            "review": row["review"], "sections": len(parse_review(row["review"]).sections), "text_source": None,
            "truncated": False, "cut": None, "kept_chars": None, "paper_chars": None, "answer_truncated": False,
            "input_tokens": None, "output_tokens": None, "tokens": None, "cost": None,
            "rating_answer": _number(row["rating"]), "confidence_answer": _number(row["confidence"]),
        })
    candidates = pl.DataFrame(rows, schema=GENERATED)
    rejects = schema.rejects([{"stage": "submit", "entity": "submitted_review", "entity_id": f"{name}#{r['row']}",
                               "paper_id": r["paper_id"], "venue_id": venues.get(r["paper_id"] or ""),
                               "rule": r["rule"], "detail": r["detail"]} for r in rejected])
    if candidates.is_empty():
        reasons = Counter(r["rule"] for r in rejected)
        if exclusions.height:
            reasons["public on or before the cutoff"] += exclusions.height
        said = ", ".join(f"{n} {rule}" for rule, n in reasons.most_common()) or "the file has no rows"
        raise SubmitError(f"{Path(path).name}: no review can be scored ({said})")
    models = sorted({r["model"] for r in kept if r["model"]})
    meta = {"name": name, "pipeline": pipeline, "file": Path(path).name,
            "file_sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest(), "format": read.fmt,
            "knowledge_cutoff": cutoff, "submitted_at": datetime.now(UTC), "model": "; ".join(models) or None,
            "rows_in": read.n_rows, "accepted": candidates.height, "excluded": exclusions.height,
            "rejected": rejects.height, "benchmark_papers": papers.height,
            "missing": papers.height - candidates.height - exclusions.height, "replaced": replaced}
    assert meta["accepted"] + meta["excluded"] + meta["rejected"] == meta["rows_in"], meta  # every row lands once
    return Submission(name, candidates, exclusions.cast(dict(EXCLUSIONS)), rejects, meta)


def judge_submission(submission: Submission, cfg: Config) -> PreprocessOutput:
    """The submitted reviews preprocessed into judgments with the [preprocess] LLM, like generated ones."""
    from tasks.lm import make_lm

    return preprocess_reviews(as_reviews(submission.candidates), make_lm(cfg.preprocess, cache_dir(cfg, "llm")),
                              cfg.preprocess)


def write_submission(cfg: Config, pipeline: str, submission: Submission, judged: PreprocessOutput) -> StageSummary:
    """Write the submission's folder beside the old one and swap it in; the summary."""
    base = submit_dir(cfg, pipeline)
    base.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=base, prefix=f".{submission.name}.", suffix=".partial"))
    usage = judged.usage.with_columns(purpose=pl.lit(f"submit:{submission.name}"))
    try:
        frames = {"submitted_candidates": submission.candidates, "candidate_judgments": judged.judgments,
                  "submitted_exclusions": submission.exclusions, "rejects": pl.concat([submission.rejects, judged.rejects]),
                  "usage": usage, "submission": pl.DataFrame([submission.meta], schema=SUBMISSIONS)}
        for name, frame in frames.items():
            write_parquet(frame, scratch / f"{name}.parquet")
        target = submit_dir(cfg, pipeline, submission.name)
        old = base / f".{submission.name}.old"
        shutil.rmtree(old, ignore_errors=True)
        if target.exists():
            target.rename(old)
        scratch.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(scratch)
    meta = submission.meta
    return StageSummary(meta["rows_in"], meta["accepted"], **llm_figures(usage), details={
        **{k: meta[k] for k in ("accepted", "excluded", "rejected", "missing", "benchmark_papers", "replaced")},
        "rejects_by_rule": dict(Counter(submission.rejects["rule"].to_list()).most_common()),
        "candidate_judgments": judged.judgments.height, "reviews_without_judgments": judged.stats.get(
            "reviews_rejected", 0)})
