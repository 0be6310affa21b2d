"""`grebench submit`: reviews written by any system become a candidate on the leaderboard.

A submission is a file of reviews of the benchmark's papers (tasks/stages/generate/submitted_file.py) under a
name and a declared training-data cutoff. Every row of the file ends in exactly one place:

    candidates    a usable review of a benchmark paper public after the cutoff (scored)
    exclusions    a usable review of a paper public on or before the cutoff (the contamination
                  guard, tasks/stages/generate/contamination.py, exactly as for a generated candidate: never scored)
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

Everything from the name check to the swap runs under the name's lock (`submission_lock`): a second
submit of the name at the same time stops in one line. `submit/<name>` is a link to a hidden version
folder (`.<name>.<hex>.v`): a new version is written whole, then the link is replaced by one rename,
so a kill at any moment leaves the previous submission or the new one, never neither. A name already
submitted is replaced only when asked (`replace=True`).
The score stage reads these candidates next to the generated ones (tasks/core/submitted.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import re
import shutil
import uuid
from collections import Counter
from collections.abc import Iterator
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
from tasks.core.schema import EXCLUSIONS, GENERATED, SUBMISSIONS
from tasks.core.submitted import submit_dir
from tasks.core.summary import StageSummary, llm_figures
from tasks.judgments.extract import PreprocessOutput, preprocess_reviews
from tasks.stages.generate.contamination import guard
from tasks.stages.generate.reviews import as_reviews, parse_review
from tasks.stages.generate.screening import screen_review
from tasks.stages.generate.submitted_file import ReadRows, read_rows

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
RESERVED = ("human",)
MAX_NAME = 100   # characters of a submission name (a folder name, a leaderboard label)
FLAGS = pl.Schema({"name": pl.String, "row": pl.Int64, "paper_id": pl.String, "candidate_id": pl.String,
                   "kind": pl.String, "detail": pl.String})


class SubmitError(GrebenchError, ValueError):
    """A submission that cannot be taken as given: one line for the user, nothing written."""


@dataclass
class Submission:
    name: str
    candidates: pl.DataFrame      # GENERATED
    exclusions: pl.DataFrame      # EXCLUSIONS
    rejects: pl.DataFrame         # REJECTS, stage submit
    meta: dict[str, Any]          # a SUBMISSIONS row
    flags: pl.DataFrame | None = None   # FLAGS: what screening found in the accepted reviews


def check_name_text(name: str) -> None:
    """A SubmitError unless `name` is a usable leaderboard and folder name (checked before anything is touched)."""
    if len(name) > MAX_NAME:
        raise SubmitError(f"--name {name[:40]!r}...: {len(name)} characters; at most {MAX_NAME}")
    if not NAME.match(name):
        raise SubmitError(f"--name {name!r}: use letters, digits, '.', '_' and '-' (starting with a letter or digit)")
    if name.lower() in RESERVED:
        raise SubmitError(f"--name {name!r} is reserved for the human baseline")


def check_name(cfg: Config, pipeline: str, name: str, replace: bool) -> bool:
    """Whether a submission of this name exists (and may be replaced); a bad name is a SubmitError.
    Call it under `submission_lock`, so that nothing changes between this check and the swap."""
    check_name_text(name)
    if name in {c.name for c in cfg.generate.candidates}:
        raise SubmitError(f"--name {name!r} is a configured generate candidate; choose another name")
    exists = (submit_dir(cfg, pipeline, name) / "submission.parquet").is_file()
    if exists and not replace:
        raise SubmitError(f"a submission named {name!r} exists in pipeline {pipeline!r}; pass --replace to replace it")
    return exists


@contextlib.contextmanager
def submission_lock(cfg: Config, pipeline: str, name: str) -> Iterator[None]:
    """Hold the lock of submission `name` (an flock on submit/<name>.lock, freed by the kernel if this
    process dies); another submit of the name under way is a SubmitError at once, never a wait."""
    from filelock import FileLock, Timeout

    check_name_text(name)
    base = submit_dir(cfg, pipeline)
    base.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(base / f"{name}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise SubmitError(f"another `grebench submit` of {name!r} in pipeline {pipeline!r} is under way; "
                          "try again when it has ended") from None
    try:
        restore_interrupted(base, name)
        yield
    finally:
        lock.release()


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
            "rating_method": "submitted" if row["rating"] is not None else None,
        })
    candidates = pl.DataFrame(rows, schema=GENERATED)
    scored = {r["paper_id"] for r in rows}
    flags = pl.DataFrame([{"name": name, "row": row["row"], "paper_id": row["paper_id"],
                           "candidate_id": f"{name}/{row['paper_id']}", "kind": flag.kind, "detail": flag.detail}
                          for row in kept if row["paper_id"] in scored for flag in screen_review(row["review"])],
                         schema=FLAGS)
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
            "missing": papers.height - candidates.height - exclusions.height, "replaced": replaced,
            "flagged": flags["candidate_id"].n_unique()}
    assert meta["accepted"] + meta["excluded"] + meta["rejected"] == meta["rows_in"], meta  # every row lands once
    return Submission(name, candidates, exclusions.cast(dict(EXCLUSIONS)), rejects, meta, flags)


def judge_submission(submission: Submission, cfg: Config) -> PreprocessOutput:
    """The submitted reviews preprocessed into judgments with the [preprocess] LLM, like generated ones."""
    from tasks.lm import make_lm

    return preprocess_reviews(as_reviews(submission.candidates), make_lm(cfg.preprocess, cache_dir(cfg, "llm")),
                              cfg.preprocess)


def version_pattern(name: str) -> re.Pattern[str]:
    """The hidden folders (and link scratch names) that hold versions of submission `name`."""
    return re.compile(rf"\.{re.escape(name)}\.(?:[0-9a-f]{{32}}|legacy)\.(?:v|link)")


def restore_interrupted(base: Path, name: str) -> None:
    """Undo what a killed swap or write left (under the lock): a legacy folder moved aside is linked back,
    versions no link points to and link scratch names are removed."""
    target, legacy = base / name, base / f".{name}.legacy.v"
    if legacy.is_dir() and not os.path.lexists(target):
        point(target, legacy)
    current = os.readlink(target) if target.is_symlink() else None
    pattern = version_pattern(name)
    for path in base.iterdir():
        if not pattern.fullmatch(path.name) or path.name == current:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    for old in (base / f".{name}.old", *base.glob(f".{name}.*.partial")):   # left by earlier versions
        shutil.rmtree(old, ignore_errors=True)


def point(target: Path, version: Path) -> None:
    """Make `target` a link to `version` (beside it) with one rename: a kill leaves the old or the new."""
    link = target.with_name(f".{target.name}.{uuid.uuid4().hex}.link")
    os.symlink(version.name, link)
    try:
        os.replace(link, target)
    finally:
        if os.path.lexists(link):
            link.unlink()


def swap_in(target: Path, version: Path) -> None:
    """`target` now names `version`; an older submission there is removed only once the new one is in place.
    A folder of the layout before links is first moved aside to `.<name>.legacy.v` (linked back by
    `restore_interrupted` should a kill fall between)."""
    if target.is_dir() and not target.is_symlink():
        target.rename(target.with_name(f".{target.name}.legacy.v"))
    old = os.readlink(target) if target.is_symlink() else None
    point(target, version)
    for leftover in {old, f".{target.name}.legacy.v"} - {None, version.name}:
        shutil.rmtree(target.with_name(leftover), ignore_errors=True)


def write_submission(cfg: Config, pipeline: str, submission: Submission, judged: PreprocessOutput) -> StageSummary:
    """Write the submission into a new hidden version folder and swap it in (one rename of a link);
    call it under `submission_lock`. The summary."""
    base = submit_dir(cfg, pipeline)
    base.mkdir(parents=True, exist_ok=True)
    version = base / f".{submission.name}.{uuid.uuid4().hex}.v"
    version.mkdir()
    usage = judged.usage.with_columns(purpose=pl.lit(f"submit:{submission.name}"))
    try:
        frames = {"submitted_candidates": submission.candidates, "candidate_judgments": judged.judgments,
                  "submitted_exclusions": submission.exclusions, "rejects": pl.concat([submission.rejects, judged.rejects]),
                  "usage": usage, "submission": pl.DataFrame([submission.meta], schema=SUBMISSIONS),
                  "submission_flags": submission.flags if submission.flags is not None else pl.DataFrame(schema=FLAGS)}
        for name, frame in frames.items():
            write_parquet(frame, version / f"{name}.parquet")
    except BaseException:
        shutil.rmtree(version, ignore_errors=True)
        raise
    swap_in(submit_dir(cfg, pipeline, submission.name), version)   # a version left by a failed swap: removed next time
    meta = submission.meta
    return StageSummary(meta["rows_in"], meta["accepted"], **llm_figures(usage), details={
        **{k: meta[k] for k in ("accepted", "excluded", "rejected", "missing", "benchmark_papers", "replaced",
                                "flagged")},
        "rejects_by_rule": dict(Counter(submission.rejects["rule"].to_list()).most_common()),
        "candidate_judgments": judged.judgments.height, "reviews_without_judgments": judged.stats.get(
            "reviews_rejected", 0)})
