"""The metrics behind an LLM (oracle cells, judges, RevisEval, review quality) as paper shards, resumable.

    score/metric_shards/<shard>/candidates.parquet, references, synopses, negatives   the shard's inputs
    score/metric_shards/<shard>/usage.parquet, llm_answers.parquet                    its LLM calls (LLMLog)
    score/metric_shards/<shard>/quality-<table>.parquet, quality_stats.json          its review-quality work
    score/metric_shards/<shard>/scores.parquet                                        SCORES rows, written last

A shard is a group of papers: its candidates, their references (with the negatives drawn for them,
which are other papers' reviews), their synopses, scored by `score_metrics` like the whole run would
be. Its name hashes the metric names, the models that answer (the score config less its speed-only
keys, the evaluation LM's key), the review-quality facts of its papers and its input rows, so the
same work always has the same name. Every file is written atomically and `scores.parquet` last: a
shard with scores is done, and is skipped (a killed run resumes where it stopped). Resources are
built inside `score_metric_shard` from the config (LLM clients, locks and models do not travel), so
a shard runs in this process or on any worker of tasks/scoring/fanout.py `fan_out_metrics`.

Metrics that read every paper at once stay out of the shards (`ALL_PAPERS`: focus_kl_*, a model's
category distribution over all its papers); so do the metrics of the other needs (GEM's
log-likelihoods have their own shards, tasks/scoring/shards.py; BLEU, ROUGE-L, BERTScore, BARTScore).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from tasks.core.config import Config
from tasks.core.layout import write_parquet
from tasks.core.locks import write_bytes_atomic
from tasks.core.schema import SCORES
from tasks.metrics.llm_log import LLM_ANSWERS, LLMLog, write_llm_log
from tasks.metrics.quality import load_facts, needs_quality, quality_work
from tasks.metrics.registry import get

SHARDED_NEEDS = frozenset({"llm_oracle", "llm_judge", "llm_reviser", "review_quality"})
ALL_PAPERS = frozenset({"focus_kl_strengths", "focus_kl_weaknesses", "focus_kl_questions"})
# keys of [score] that change how fast, not what, a shard scores (tasks/stages/validate/releases.py SPEED_ONLY)
SPEED_ONLY = {"token_budget", "shard_size", "metric_shard_papers", "task_runner", "workers", "runner_address",
              "gpu_concurrency", "slot_wait_s", "metrics", "baselines"}
INPUTS = {"candidates": ("candidate",), "references": ("review_id",), "synopses": ("paper_id",),
          "negatives": ("candidate", "reference", "draw")}

# (folder, shard names, metric names, config, pipeline, LLM cache folder) -> one status dict per shard
MetricShardRunner = Callable[[Path, list[str], tuple[str, ...], Config, str, Path | None], list[dict]]


def sharded_metrics(names: Sequence[str]) -> tuple[str, ...]:
    """The metrics among `names` scored per paper shard: those behind an LLM, less `ALL_PAPERS`."""
    return tuple(m.name for m in get(list(dict.fromkeys(names))) if m.needs in SHARDED_NEEDS
                 and m.name not in ALL_PAPERS) if names else ()


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part.encode()).digest())
    return h.hexdigest()


def _rows(frame: pl.DataFrame, key: Sequence[str]) -> str:
    return frame.sort([*key, *(c for c in frame.columns if c not in key)]).write_ndjson()


def identity(cfg: Config, names: Sequence[str], eval_lm: str) -> str:
    """What the shards' scores depend on besides their rows: the metrics, the evaluation LM and the models
    and settings of `[score]` (its speed-only keys left out)."""
    settings = cfg.score.model_dump(mode="json", exclude=SPEED_ONLY)
    return json.dumps({"metrics": sorted(names), "eval_lm": eval_lm, "score": settings}, sort_keys=True)


def write_metric_shards(folder: Path, cfg: Config, pipeline: str, names: Sequence[str], eval_lm: str,
                        candidates: pl.DataFrame, references: pl.DataFrame, synopses: pl.DataFrame,
                        negatives: pl.DataFrame | None, papers_per_shard: int) -> list[str]:
    """Write the inputs of each group of `papers_per_shard` papers (by paper id) under `folder`; the shards' names."""
    who = identity(cfg, names, eval_lm)
    facts = load_facts(cfg, pipeline) if needs_quality(names) else None
    reads_negatives = negatives is not None and any(m.negatives for m in get(list(names)))
    papers = sorted(candidates["paper_id"].unique().to_list())
    out = []
    for offset in range(0, len(papers), papers_per_shard):
        group = pl.Series(papers[offset:offset + papers_per_shard]).implode()
        frames = {"candidates": candidates.filter(pl.col("paper_id").is_in(group)),
                  "synopses": synopses.filter(pl.col("paper_id").is_in(group))}
        drawn = None
        if reads_negatives:
            drawn = negatives.filter(pl.col("candidate").is_in(frames["candidates"]["candidate"].implode()))
            frames["negatives"] = drawn
        wanted = pl.col("paper_id").is_in(group)
        if drawn is not None:
            wanted = wanted | pl.col("review_id").is_in(drawn["negative"].implode())
        frames["references"] = references.filter(wanted)
        parts = [who, *(_rows(frames[n], INPUTS[n]) for n in sorted(frames))]
        if facts is not None:
            parts += [_rows(facts.reviews.filter(pl.col("paper_id").is_in(group)), ("review_id",)),
                      _rows(facts.papers.filter(pl.col("paper_id").is_in(group)), ("paper_id",))]
        name = "metrics-" + _digest(*parts)[:16]
        shard = Path(folder) / name
        for n, frame in frames.items():
            if not (shard / f"{n}.parquet").is_file():
                write_parquet(frame, shard / f"{n}.parquet")
        out.append(name)
    return out


def score_metric_shard(folder: Path, shard: str, names: Sequence[str], cfg: Config, pipeline: str,
                       llm_cache: Path | None) -> dict:
    """Score one shard's metrics with Resources built here, and write what it leaves; a shard already done is skipped."""
    from tasks.metrics.registry import score_metrics
    from tasks.metrics.resources import build_resources

    where = Path(folder) / shard
    if (where / "scores.parquet").is_file():
        return {"shard": shard, "status": "skipped", "candidates": 0, "seconds": 0.0}
    frames = {n: pl.read_parquet(where / f"{n}.parquet") for n in INPUTS if (where / f"{n}.parquet").is_file()}
    started = time.perf_counter()
    log, quality = LLMLog(), quality_work(cfg, pipeline, llm_cache, names)
    resources = build_resources(cfg.score, llm_cache=llm_cache, log=log, quality=quality)
    scores = score_metrics(names, frames["candidates"], frames["references"], frames["synopses"], resources,
                           negatives=frames.get("negatives"))
    seconds = time.perf_counter() - started
    write_llm_log(log, where)
    if quality is not None:
        for table, frame in quality.tables.items():
            if frame.width:
                write_parquet(frame, where / f"quality-{table}.parquet")
        write_bytes_atomic(where / "quality_stats.json", json.dumps(dict(quality.stats), sort_keys=True).encode())
    write_parquet(scores, where / "scores.parquet")
    return {"shard": shard, "status": "scored", "candidates": frames["candidates"].height, "seconds": round(seconds, 3)}


def run_metric_shards_in_process(folder: Path, shards: list[str], names: tuple[str, ...], cfg: Config,
                                 pipeline: str, llm_cache: Path | None) -> list[dict]:
    """Score the shards one after the other in this process."""
    return [score_metric_shard(folder, s, names, cfg, pipeline, llm_cache) for s in shards]


def read_shard_scores(folder: Path, shards: list[str]) -> pl.DataFrame:
    """All SCORES rows of the given shards; a shard without scores is an error (the run is not complete)."""
    missing = [s for s in shards if not (Path(folder) / s / "scores.parquet").is_file()]
    if missing:
        raise FileNotFoundError(f"{len(missing)} metric shard(s) have no scores, e.g. {missing[0]}")
    frames = [pl.read_parquet(Path(folder) / s / "scores.parquet") for s in shards]
    return pl.concat(frames).cast(dict(SCORES)) if frames else pl.DataFrame(schema=SCORES)


class MetricShards:
    """SCORES rows of the sharded metrics over the inputs, through paper shards under `folder`.

    `runs` collects the status of every shard run; after a call, `quality_tables` and `quality_stats`
    hold the review-quality work of all its shards, and their LLM calls are added to the `log` given."""

    def __init__(self, folder: Path, cfg: Config, pipeline: str, llm_cache: Path | None,
                 run: MetricShardRunner = run_metric_shards_in_process) -> None:
        self.folder, self.cfg, self.pipeline, self.llm_cache, self.run = Path(folder), cfg, pipeline, llm_cache, run
        self.runs: list[dict] = []
        self.shards = 0
        self.quality_tables: dict[str, pl.DataFrame] = {}
        self.quality_stats: Counter = Counter()

    def __call__(self, names: Sequence[str], eval_lm: str, candidates: pl.DataFrame, references: pl.DataFrame,
                 synopses: pl.DataFrame, negatives: pl.DataFrame | None, log: LLMLog) -> pl.DataFrame:
        names = tuple(dict.fromkeys(names))
        shards = write_metric_shards(self.folder, self.cfg, self.pipeline, names, eval_lm, candidates, references,
                                     synopses, negatives, self.cfg.score.metric_shard_papers)
        self.runs += self.run(self.folder, shards, names, self.cfg, self.pipeline, self.llm_cache)
        self.shards += len(shards)
        for shard in shards:
            self._collect(self.folder / shard, log)
        return read_shard_scores(self.folder, shards)

    def _collect(self, where: Path, log: LLMLog) -> None:
        if (where / "usage.parquet").is_file():
            log.add(pl.read_parquet(where / "usage.parquet"),
                    pl.read_parquet(where / "llm_answers.parquet").cast(dict(LLM_ANSWERS)))
        for path in sorted(where.glob("quality-*.parquet")):
            table = path.stem.removeprefix("quality-")
            got = pl.read_parquet(path)
            have = self.quality_tables.get(table)
            self.quality_tables[table] = got if have is None else pl.concat([have, got], how="diagonal_relaxed")
        if (where / "quality_stats.json").is_file():
            self.quality_stats.update(json.loads((where / "quality_stats.json").read_text()))

    def details(self) -> dict[str, Any]:
        """The stage summary's counts of metric shards."""
        return {"metric_shards": self.shards,
                "metric_shards_scored": sum(r["status"] == "scored" for r in self.runs),
                "metric_shards_skipped": sum(r["status"] == "skipped" for r in self.runs)}
