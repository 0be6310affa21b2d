"""Releases: a version id for everything that makes two leaderboards comparable.

A release id hashes five parts (each also kept as its own hash, so a changelog can say which moved):

- papers: the benchmark sample (venue, paper id, title, abstract);
- references: the curated human reviews the candidates are scored against and their judgments
  (review id, paper, position, stance, text) from the preprocess stage;
- prompts: the preprocessing LLM and every prompt file a metric or preprocessing reads
  (tasks/prompts/*.md, name and content; the candidates' own review prompts are left out);
- evaluation LMs: the resolved keys of `[score] eval_lms` (model, dtype, quantization);
- metrics: the rest of `[score]`, without the settings that change speed only (shards,
  workers, ...), and the code of the metric families, the judgment extractor and the sentence
  encoder (tasks/metrics, tasks/judgments, tasks/lm/encoder.py: each module's syntax tree without docstrings, so prompts written in code such as
  GEM's evaluation prompt and the oracle's count, and comments or layout do not).

The candidates are not part of it: adding a model, generated or submitted, keeps the release, so
its scores are comparable with every other model's of the same release. Each leaderboard build
records its release as data/<pipeline>/releases/<release_id>.parquet (one row, written once: the
parts' hashes and the lists a changelog compares: venues, papers, metrics, evaluation LMs, prompts,
all fixed by the release id), the models on it as releases/models/<release_id>.parquet (a row per
model, added when the model first appears under the release and never rewritten), and the changelog
lists what changed from each release to the next. So a published row under a release id never
changes: a new model adds rows, it rewrites none.
"""

from __future__ import annotations

import ast
import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from tasks.core.config import Config
from tasks.core.layout import pipeline_dir, stage_dir, write_parquet
from tasks.core.prompts import PROMPTS
from tasks.lm import eval_specs

CANDIDATE_PROMPTS = "review-"       # tasks/prompts/review-*.md: what candidates are asked, not the benchmark
SPEED_ONLY = ("token_budget", "shard_size", "metric_shard_papers", "task_runner", "workers", "runner_address",
              "cuda_devices", "gpu_concurrency", "slot_wait_s")
EVAL_LM_KEYS = ("eval_lm", "eval_lm_cuda", "dtype", "quantization", "eval_lms")   # the eval_lms part, resolved
PARTS = ("papers", "references", "prompts", "eval_lms", "metrics")

RELEASES = pl.Schema({
    "release_id": pl.String, "pipeline": pl.String, "created_at": pl.Datetime("ms", "UTC"),
    "n_papers": pl.Int64, "n_references": pl.Int64, "venues": pl.List(pl.String), "papers": pl.List(pl.String),
    "metrics": pl.List(pl.String), "eval_lms": pl.List(pl.String), "prompts": pl.List(pl.String),
    **{f"{part}_hash": pl.String for part in PARTS},
})
RELEASE_MODELS = pl.Schema({"release_id": pl.String, "model": pl.String, "added_at": pl.Datetime("ms", "UTC")})
CHANGES = pl.Schema({"release_id": pl.String, "previous_id": pl.String, "created_at": pl.Datetime("ms", "UTC"),
                     "what": pl.String, "added": pl.List(pl.String), "removed": pl.List(pl.String),
                     "detail": pl.String})


def digest(value: Any) -> str:
    """sha256 of a value's canonical JSON (sorted keys), 16 hex characters."""
    text = json.dumps(value, sort_keys=True, default=str, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def frame_digest(frame: pl.DataFrame, order: list[str]) -> str:
    """A content hash of a frame that does not depend on its row order or Parquet encoding."""
    rows = frame.sort(order).rows() if frame.height else []
    return digest([list(frame.columns), rows])


@dataclass(frozen=True)
class Release:
    release_id: str
    hashes: dict[str, str]            # part -> hash
    venues: list[str]
    papers: list[str]
    n_references: int
    metrics: list[str]
    eval_lms: list[str]
    prompts: list[str]


def benchmark_papers(cfg: Config, pipeline: str) -> pl.DataFrame:
    """venue_id, paper_id, title, abstract of the benchmark sample (curated, in_benchmark)."""
    frames = []
    for venue in cfg.pipelines[pipeline].venues:
        path = stage_dir(cfg, pipeline, "curate", venue) / "papers.parquet"
        if path.is_file():
            papers = pl.read_parquet(path)
            if "in_benchmark" in papers.columns:
                papers = papers.filter(pl.col("in_benchmark").fill_null(False))
            frames.append(papers.select("venue_id", "paper_id", "title", "abstract"))
    if not frames:
        return pl.DataFrame(schema={"venue_id": pl.String, "paper_id": pl.String, "title": pl.String,
                                    "abstract": pl.String})
    return pl.concat(frames).unique("paper_id", keep="first").sort("venue_id", "paper_id")


def reference_judgments(cfg: Config, pipeline: str, papers: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(references, judgments): the curated reviews of the benchmark papers and their judgment lines."""
    frames = []
    for venue in cfg.pipelines[pipeline].venues:
        path = stage_dir(cfg, pipeline, "curate", venue) / "reviews.parquet"
        if path.is_file():
            frames.append(pl.read_parquet(path, columns=["review_id", "paper_id", "review_text"]))
    references = pl.concat(frames) if frames else pl.DataFrame(
        schema={"review_id": pl.String, "paper_id": pl.String, "review_text": pl.String})
    references = references.join(papers.select("paper_id"), on="paper_id", how="semi")
    path = stage_dir(cfg, pipeline, "preprocess") / "judgments.parquet"
    columns = ["review_id", "position", "stance", "text"]
    judgments = (pl.read_parquet(path, columns=columns) if path.is_file()
                 else pl.DataFrame(schema={"review_id": pl.String, "position": pl.Int32, "stance": pl.String,
                                           "text": pl.String}))
    return references, judgments.join(references.select("review_id"), on="review_id", how="semi")


def prompt_files() -> dict[str, str]:
    """name -> content hash of every prompt file but the candidates' review prompts."""
    return {p.stem: hashlib.sha256(p.read_bytes()).hexdigest()[:16] for p in sorted(PROMPTS.glob("*.md"))
            if not p.stem.startswith(CANDIDATE_PROMPTS)}


METRIC_CODE = ("metrics", "judgments", "lm/encoder.py")   # folders and modules under tasks/ whose code makes the scores


def _without_docstrings(tree: ast.Module) -> ast.Module:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return tree


def metric_code() -> dict[str, str]:
    """module path -> hash of its syntax tree without docstrings, for every module that makes scores."""
    root = Path(__file__).resolve().parents[2]
    files = sorted(f for part in METRIC_CODE for f in ([root / part] if part.endswith(".py") else
                                                       (root / part).rglob("*.py")) if f.is_file())
    return {str(f.relative_to(root)): digest(ast.dump(_without_docstrings(ast.parse(f.read_text(encoding="utf-8")))))
            for f in files}


def metric_settings(cfg: Config) -> dict[str, Any]:
    """`[score]` as plain data without the settings that change speed only and the evaluation LM's
    (hashed as the LMs this machine resolves them to)."""
    settings = cfg.score.model_dump(mode="json")
    return {k: v for k, v in settings.items() if k not in SPEED_ONLY + EVAL_LM_KEYS}


def release_of(cfg: Config, pipeline: str) -> Release:
    """The release of the pipeline's current inputs and settings (reads the curate and preprocess outputs)."""
    papers = benchmark_papers(cfg, pipeline)
    references, judgments = reference_judgments(cfg, pipeline, papers)
    prompts = prompt_files()
    preprocess = {"backend": cfg.preprocess.backend, "model": cfg.preprocess.model,
                  "prompt_version": cfg.preprocess.prompt_version,
                  "synopsis_prompt_version": cfg.preprocess.synopsis_prompt_version,
                  "max_tokens": cfg.preprocess.max_tokens, "max_paper_chars": cfg.preprocess.max_paper_chars}
    eval_lms = [spec.resolved().key for spec in eval_specs(cfg.score)]
    settings = metric_settings(cfg)
    hashes = {
        "papers": frame_digest(papers, ["paper_id"]),
        "references": digest([frame_digest(references, ["review_id"]),
                              frame_digest(judgments, ["review_id", "position"])]),
        "prompts": digest([preprocess, prompts]),
        "eval_lms": digest(eval_lms),
        "metrics": digest([settings, metric_code()]),
    }
    return Release(
        release_id=digest([hashes[p] for p in PARTS])[:12],
        hashes=hashes,
        venues=sorted(papers["venue_id"].unique().to_list()),
        papers=papers["paper_id"].to_list(),
        n_references=references.height,
        metrics=list(dict.fromkeys(cfg.score.all_metrics)),
        eval_lms=eval_lms,
        prompts=[f"{name}@{h}" for name, h in prompts.items()],
    )


def releases_dir(cfg: Config, pipeline: str) -> Path:
    return pipeline_dir(cfg, pipeline) / "releases"


def read_releases(cfg: Config, pipeline: str) -> pl.DataFrame:
    """Every release the pipeline has recorded, oldest first."""
    files = sorted(releases_dir(cfg, pipeline).glob("*.parquet"))
    if not files:
        return pl.DataFrame(schema=RELEASES)
    return pl.concat([pl.read_parquet(f).select(RELEASES.names()).cast(dict(RELEASES)) for f in files]
                     ).sort("created_at", "release_id")


def read_release_models(cfg: Config, pipeline: str, release_id: str) -> pl.DataFrame:
    """RELEASE_MODELS: the models recorded under a release, in the order they came."""
    path = releases_dir(cfg, pipeline) / "models" / f"{release_id}.parquet"
    return pl.read_parquet(path).cast(dict(RELEASE_MODELS)) if path.is_file() else pl.DataFrame(schema=RELEASE_MODELS)


def record_release(cfg: Config, pipeline: str, release: Release, models: list[str],
                   now: datetime | None = None) -> pl.DataFrame:
    """Write the release's row once (first seen at `created_at`) and add the models new to it (each with
    the time it first appeared); rows already written stay as they are. The release's row."""
    now = now or datetime.now(UTC)
    path = releases_dir(cfg, pipeline) / f"{release.release_id}.parquet"
    if path.is_file():
        row = pl.read_parquet(path).select(RELEASES.names()).cast(dict(RELEASES))
    else:
        row = pl.DataFrame([{
            "release_id": release.release_id, "pipeline": pipeline, "created_at": now,
            "n_papers": len(release.papers), "n_references": release.n_references, "venues": release.venues,
            "papers": release.papers, "metrics": release.metrics, "eval_lms": release.eval_lms,
            "prompts": release.prompts, **{f"{part}_hash": release.hashes[part] for part in PARTS},
        }], schema=RELEASES)
        write_parquet(row, path)
    known = read_release_models(cfg, pipeline, release.release_id)
    new = [m for m in sorted(set(models)) if m not in set(known["model"].to_list())]
    if new:
        added = pl.DataFrame({"release_id": [release.release_id] * len(new), "model": new, "added_at": [now] * len(new)},
                             schema=RELEASE_MODELS)
        write_parquet(pl.concat([known, added]), releases_dir(cfg, pipeline) / "models" / f"{release.release_id}.parquet")
    return row


LISTED = ("venues", "papers", "metrics", "eval_lms", "prompts")   # fixed by the release id: no row is rewritten


def changelog(releases: pl.DataFrame) -> pl.DataFrame:
    """CHANGES: per release (oldest first) what differs from the one before it, one row per kind of
    change; the first release lists everything as added. A part whose hash moved while its lists did
    not (e.g. a reference's judgments, a metric setting) gets a row of its own. Models are not listed:
    they are not part of a release (`release_models` says which models each release holds)."""
    rows: list[dict[str, Any]] = []
    previous: dict[str, Any] | None = None
    for current in releases.sort("created_at", "release_id").iter_rows(named=True):
        base = {"release_id": current["release_id"], "created_at": current["created_at"],
                "previous_id": previous["release_id"] if previous else None}
        for what in LISTED:
            now = current[what] or []
            before = (previous[what] or []) if previous else []
            added = [x for x in now if x not in set(before)]
            removed = [x for x in before if x not in set(now)]
            if added or removed:
                rows.append({**base, "what": what, "added": added, "removed": removed,
                             "detail": f"{len(added)} added, {len(removed)} removed"})
        if previous:
            listed = {r["what"] for r in rows if r["release_id"] == current["release_id"]}
            for part in ("references", "metrics"):
                if current[f"{part}_hash"] != previous[f"{part}_hash"] and part not in listed:
                    label = "reference judgments" if part == "references" else "metric settings"
                    rows.append({**base, "what": f"{part}_hash", "added": [], "removed": [],
                                 "detail": f"{label} changed ({previous[f'{part}_hash']} -> {current[f'{part}_hash']})"})
        previous = current
    return pl.DataFrame(rows, schema=CHANGES) if rows else pl.DataFrame(schema=CHANGES)
