"""What a run's stages read from the stages before them, checked before any of them starts.

A stage reads the Parquet files the stages before it in its pipeline wrote (tasks/core/frames.py).
When a run leaves such a stage out (`--stages score`), those files must already be there, and made
with the settings the run has now: a run that would stop at its first task on a missing file, or go
on with curated papers of another sample size, stops before Prefect starts anything, in one line
that names the stage to run first.

Each stage that finishes leaves a receipt, data/<pipeline>/receipts/<stage>.json: the digest of the
settings its outputs depend on (the venues, the synthetic source, its own table and those of every
stage before it). A receipt that disagrees with today's digest marks outputs of another config;
outputs with no receipt (written before receipts existed) are taken as they are.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from tasks.core.config import CONFIGURED_STAGES, STAGES, Config
from tasks.core.errors import GrebenchError
from tasks.core.layout import slug
from tasks.core.locks import write_atomic

# The file whose presence says a stage has run: per venue for ingest and curate, per pipeline after.
KEY_FILES = {"ingest": "reviews.parquet", "curate": "reviews.parquet", "preprocess": "judgments.parquet",
             "generate": "candidates.parquet", "qualify": "qualification.parquet", "score": "scores.parquet",
             "validate": "validation.parquet"}
PER_VENUE = ("ingest", "curate")


class MissingInputs(GrebenchError, FileNotFoundError):
    """A stage of the run reads outputs that are not there, or that other settings made."""


def key_files(cfg: Config, pipeline: str, stage: str) -> list[Path]:
    """The files that say `stage` of `pipeline` has run (nothing is created on the way)."""
    base = cfg.data_dir / pipeline
    if stage in PER_VENUE:
        return [base / slug(venue) / stage / KEY_FILES[stage] for venue in cfg.pipelines[pipeline].venues]
    return [base / stage / KEY_FILES[stage]]


def settings_digest(cfg: Config, pipeline: str, stage: str) -> str:
    """Digest of the settings the outputs of `stage` depend on: the pipeline's venues and their tables,
    its synthetic source, and the tables of `stage` and of every stage before it (as the pipeline's
    overrides left them)."""
    spec = cfg.pipelines[pipeline]
    upto = [s for s in STAGES[:STAGES.index(stage) + 1] if s in CONFIGURED_STAGES]
    settings = {
        "venues": list(spec.venues),
        "venue_tables": {v: cfg.venues[v].model_dump(mode="json") for v in spec.venues if v in cfg.venues},
        "source": spec.source,
        "synthetic": spec.synthetic.model_dump(mode="json") if spec.source == "synthetic" else None,
        "stages": {s: getattr(cfg, s).model_dump(mode="json") for s in upto},
    }
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


def receipt_path(cfg: Config, pipeline: str, stage: str) -> Path:
    return cfg.data_dir / pipeline / "receipts" / f"{stage}.json"


def write_receipt(cfg: Config, pipeline: str, stage: str, run_id: str) -> None:
    """Record that `stage` finished with today's settings (after its outputs are written)."""
    if stage not in KEY_FILES:
        return
    path = receipt_path(cfg, pipeline, stage)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"stage": stage, "settings": settings_digest(cfg, pipeline, stage), "run_id": run_id,
            "finished": datetime.now(UTC).isoformat(timespec="seconds")}
    write_atomic(path, lambda target: Path(target).write_text(json.dumps(body), encoding="utf-8"))


def receipt_settings(cfg: Config, pipeline: str, stage: str) -> str | None:
    """The settings digest `stage`'s receipt records; None where there is none (or it is unreadable)."""
    try:
        return json.loads(receipt_path(cfg, pipeline, stage).read_text(encoding="utf-8")).get("settings")
    except (OSError, ValueError, AttributeError):
        return None


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def missing_inputs(cfg: Config, pipeline: str, chosen: Sequence[str]) -> str | None:
    """One line naming the stage to run first when a chosen stage reads outputs that are missing or
    that other settings made; None when every chosen stage can start. The stages a chosen one reads
    are those before it in the pipeline; those the run itself makes are not checked."""
    configured = list(cfg.pipelines[pipeline].stages)
    if not chosen:
        return None
    for earlier in configured[:configured.index(chosen[-1])]:
        if earlier in chosen or earlier not in KEY_FILES:
            continue
        reader = next(s for s in chosen if configured.index(s) > configured.index(earlier))
        gone = [path for path in key_files(cfg, pipeline, earlier) if not path.is_file()]
        if gone:
            return (f"{reader} reads the {earlier} stage's outputs, and {_shown(gone[0])} is not there: "
                    f"run `grebench run {pipeline} --stages {','.join(_from(configured, earlier, chosen))}` "
                    f"(or the whole pipeline) first")
        made_with = receipt_settings(cfg, pipeline, earlier)
        if made_with is not None and made_with != settings_digest(cfg, pipeline, earlier):
            return (f"the {earlier} stage's outputs in {_shown(cfg.data_dir / pipeline)} were made with other "
                    f"settings than pipelines.toml has now: run `grebench run {pipeline} --stages "
                    f"{','.join(_from(configured, earlier, chosen))}` first")
    return None


def _from(configured: list[str], stage: str, chosen: Sequence[str]) -> list[str]:
    """The pipeline's stages from `stage` up to the last chosen one: the run that makes the inputs and goes on."""
    return configured[configured.index(stage):configured.index(chosen[-1]) + 1]


def check_inputs(cfg: Config, pipeline: str, chosen: Sequence[str]) -> None:
    """Stop with `MissingInputs` (one line) when `missing_inputs` finds a problem."""
    problem = missing_inputs(cfg, pipeline, chosen)
    if problem is not None:
        raise MissingInputs(problem)
