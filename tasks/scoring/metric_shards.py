"""The metrics behind an LLM (oracle cells, judges, RevisEval, review quality) as paper shards, resumable.

    score/metric_shards/<shard>/candidates.parquet, references, synopses, negatives   the shard's inputs
    score/metric_shards/<shard>/usage.parquet, llm_answers.parquet                    its LLM calls (LLMLog)
    score/metric_shards/<shard>/table-<name>.parquet, counts.json                    its families' side tables
    score/metric_shards/<shard>/scores.parquet                                        SCORES rows, written last

A shard is one model's candidates (their `source`) on a group of papers: its candidates, their references (with the negatives drawn for them,
which are other papers' reviews), their synopses, scored by `score_metrics` like the whole run would
be. Its name hashes the metric names, the models that answer (the score config less its speed-only
keys, the evaluation LM's key), the facts its families read besides the inputs (`Metric.facts`:
review quality's ratings, decisions and paper texts) for its papers, and its input rows, so the
same work always has the same name. Every file is written atomically and `scores.parquet` last: a
shard with scores is done, and is skipped (a killed run resumes where it stopped). Resources are
built inside `score_metric_shard` from the config (LLM clients, locks and models do not travel), so
a shard runs in this process or on any worker of tasks/scoring/fanout.py `fan_out_metrics`.

Which metrics run here is the registry's to say (`Metric.by_paper`: a need behind an LLM,
`Need.sharded`, less the metrics that read every paper at once, `Metric.whole_run`, such as
focus_kl_*, a model's category distribution over all its papers); `score_with_tables` sends them
here when the run's Resources carry a `MetricShards` (`by_paper`). GEM's log-likelihoods have
shards of their own (tasks/scoring/shards.py); BLEU, ROUGE-L, BERTScore, BARTScore run in process.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from tasks.core.config import Config
from tasks.core.layout import write_parquet
from tasks.core.locks import write_bytes_atomic
from tasks.core.schema import SCORES
from tasks.core.slots import SlotLimit, let_go_ahead, take_ahead
from tasks.metrics.llm_log import LLM_ANSWERS, LLMLog, write_llm_log
from tasks.metrics.registry import FamilyResult, Metric, Resources, get, merge_results

FORMAT = 2   # what a shard leaves (2: any family's side tables, table-<name>.parquet); part of every shard's name
# keys of [score] that change how fast, not what, a shard scores (tasks/stages/validate/releases.py SPEED_ONLY)
SPEED_ONLY = {"token_budget", "shard_size", "metric_shard_papers", "task_runner", "workers", "runner_address",
              "cuda_devices", "gpu_concurrency", "slot_wait_s", "metrics", "baselines"}
INPUTS = {"candidates": ("candidate",), "references": ("review_id",), "synopses": ("paper_id",),
          "negatives": ("candidate", "reference", "draw")}

# (folder, shard names, metric names, config, pipeline, LLM cache folder) -> one status dict per shard
MetricShardRunner = Callable[[Path, list[str], tuple[str, ...], Config, str, Path | None], list[dict]]


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
    return json.dumps({"metrics": sorted(names), "eval_lm": eval_lm, "score": settings, "format": FORMAT},
                      sort_keys=True)


def family_facts(metrics: Sequence[Metric], resources: Resources) -> list[pl.DataFrame]:
    """The frames the metrics' families read besides their inputs (`Metric.facts`), each family's once."""
    return [frame for facts in dict.fromkeys(m.facts for m in metrics if m.facts is not None)
            for frame in facts(resources)]


def write_metric_shards(folder: Path, cfg: Config, names: Sequence[str], eval_lm: str, candidates: pl.DataFrame,
                        references: pl.DataFrame, synopses: pl.DataFrame, negatives: pl.DataFrame | None,
                        papers_per_shard: int, facts: Sequence[pl.DataFrame] = (), per_model: bool = True
                        ) -> list[str]:
    """Write the inputs of each model's candidates (`source`) on each group of `papers_per_shard` papers (by
    paper id) under `folder`; the shards' names, which hash the rows of `facts` of their papers and reviews too.
    One model's shards hold none of another's candidates, so a model added later adds shards and leaves every
    earlier one as it was: its scores are reused, never recomputed in a batch that holds the newcomer (a
    readout's padding and a judge's batch would move them). `per_model` False: a shard holds every
    candidate of its papers (validation, whose candidates are the human reviews and their perturbations:
    no model joins them later)."""
    who = identity(cfg, names, eval_lm)
    reads_negatives = negatives is not None and any(m.negatives for m in get(list(names)))
    papers = sorted(candidates["paper_id"].unique().to_list())
    sources = (sorted(candidates["source"].unique().to_list()) if per_model and "source" in candidates.columns
               else [None])
    out = []
    for offset in range(0, len(papers), papers_per_shard):
        group = pl.Series(papers[offset:offset + papers_per_shard]).implode()
        for source in sources:
            mine = candidates.filter(pl.col("paper_id").is_in(group))
            if source is not None:
                mine = mine.filter(pl.col("source") == source)
            if mine.is_empty():
                continue
            frames = {"candidates": mine, "synopses": synopses.filter(pl.col("paper_id").is_in(group))}
            drawn = None
            if reads_negatives:
                drawn = negatives.filter(pl.col("candidate").is_in(mine["candidate"].implode()))
                frames["negatives"] = drawn
            wanted = pl.col("paper_id").is_in(group)
            if drawn is not None:
                wanted = wanted | pl.col("review_id").is_in(drawn["negative"].implode())
            frames["references"] = references.filter(wanted)
            parts = [who, *(_rows(frames[n], INPUTS[n]) for n in sorted(frames)),
                     *(_rows(_facts_of(f, group, mine, frames["references"]), ()) for f in facts)]
            name = "metrics-" + _digest(*parts)[:16]
            shard = Path(folder) / name
            for n, frame in frames.items():
                if not (shard / f"{n}.parquet").is_file():
                    write_parquet(frame, shard / f"{n}.parquet")
            out.append(name)
    return out


def _facts_of(frame: pl.DataFrame, group: pl.Series, candidates: pl.DataFrame, references: pl.DataFrame
              ) -> pl.DataFrame:
    """A facts frame's rows a shard reads: its papers', and of a frame per review (`review_id`) only its own
    candidates' and references' (another model's rating is no input of this model's scores)."""
    rows = frame.filter(pl.col("paper_id").is_in(group))
    if "review_id" in rows.columns:
        own = pl.concat([candidates["candidate"], references["review_id"]]).implode()
        rows = rows.filter(pl.col("review_id").is_in(own))
    return rows


def score_metric_shard(folder: Path, shard: str, names: Sequence[str], cfg: Config, pipeline: str,
                       llm_cache: Path | None) -> dict:
    """Score one shard's metrics with Resources built here, and write what it leaves; a shard already done is skipped."""
    from tasks.metrics.registry import score_with_tables
    from tasks.metrics.resources import run_resources

    where = Path(folder) / shard
    if (where / "scores.parquet").is_file():
        return {"shard": shard, "status": "skipped", "candidates": 0, "seconds": 0.0}
    frames = {n: pl.read_parquet(where / f"{n}.parquet") for n in INPUTS if (where / f"{n}.parquet").is_file()}
    started = time.perf_counter()
    log = LLMLog()
    resources = run_resources(cfg, pipeline, names, llm_cache=llm_cache, log=log)
    scored = score_with_tables(names, frames["candidates"], frames["references"], frames["synopses"], resources,
                               negatives=frames.get("negatives"))
    seconds = time.perf_counter() - started
    write_llm_log(log, where)
    for table, frame in scored.tables.items():
        write_parquet(frame, where / f"table-{table}.parquet")
    if scored.counts:
        write_bytes_atomic(where / "counts.json", json.dumps(dict(scored.counts), sort_keys=True).encode())
    write_parquet(scored.scores, where / "scores.parquet")
    return {"shard": shard, "status": "scored", "candidates": frames["candidates"].height, "seconds": round(seconds, 3)}


def run_metric_shards_in_process(folder: Path, shards: list[str], names: tuple[str, ...], cfg: Config,
                                 pipeline: str, llm_cache: Path | None) -> list[dict]:
    """Score the shards one after the other in this process."""
    return [score_metric_shard(folder, s, names, cfg, pipeline, llm_cache) for s in shards]


def read_shard(where: Path, log: LLMLog) -> FamilyResult:
    """What one finished shard left; its LLM calls are added to `log`."""
    if (where / "usage.parquet").is_file():
        log.add(pl.read_parquet(where / "usage.parquet"),
                pl.read_parquet(where / "llm_answers.parquet").cast(dict(LLM_ANSWERS)))
    tables = {p.stem.removeprefix("table-"): pl.read_parquet(p) for p in sorted(where.glob("table-*.parquet"))}
    counts = json.loads((where / "counts.json").read_text()) if (where / "counts.json").is_file() else {}
    return FamilyResult(pl.read_parquet(where / "scores.parquet").cast(dict(SCORES)), tables, counts)


class MetricShards:
    """SCORES rows and side tables of the sharded metrics over the inputs, through paper shards under
    `folder` (`Resources.by_paper`); `runs` collects the status of every shard run, and the shards' LLM
    calls are added to the log of the Resources a call is given."""

    def __init__(self, folder: Path, cfg: Config, pipeline: str, llm_cache: Path | None,
                 run: MetricShardRunner = run_metric_shards_in_process, limit: SlotLimit | None = None,
                 per_model: bool = True) -> None:
        self.folder, self.cfg, self.pipeline, self.llm_cache, self.run = Path(folder), cfg, pipeline, llm_cache, run
        self.per_model = per_model   # one model's candidates a shard (write_metric_shards)
        self.limit = limit     # the concurrency limit `run`'s tasks hold a slot of, if any
        self.runs: list[dict] = []
        self.shards = 0
        self._counting = threading.Lock()   # evaluation LMs scoring side by side share these counts

    def take_ahead(self) -> None:
        """Take a slot for the first shard now (tasks/core/slots.py `take_ahead`), before the families
        beside start theirs: the shards are one long job, and small log-likelihood shards started a moment
        earlier would otherwise fill every slot first. The call that runs the shards frees it if unused."""
        if self.limit is not None:
            take_ahead(self.limit)

    @property
    def beside(self) -> bool:
        """Run beside the other families when `[score] gpu_concurrency` lets two scoring tasks hold the
        evaluation LM at once (tasks/metrics/registry.py `score_with_tables`; on a CPU the two sides split its
        cores: tasks/lm/local.py `sharing_cores`)."""
        return self.cfg.score.gpu_concurrency > 1

    def __call__(self, metrics: Sequence[Metric], candidates: pl.DataFrame, references: pl.DataFrame,
                 synopses: pl.DataFrame, negatives: pl.DataFrame | None, resources: Resources) -> FamilyResult:
        names = tuple(dict.fromkeys(m.name for m in metrics))
        assert resources.eval_lm is not None, "a shard's name hashes the evaluation LM"
        # a metric comparing the models of a paper (the pairwise judge) reads them all in one shard
        per_model = self.per_model and not any(m.across_models for m in metrics)
        shards = write_metric_shards(self.folder, self.cfg, names, resources.eval_lm, candidates, references,
                                     synopses, negatives, self.cfg.score.metric_shard_papers,
                                     family_facts(metrics, resources), per_model)
        try:
            runs = self.run(self.folder, shards, names, self.cfg, self.pipeline, self.llm_cache)
        finally:
            if self.limit is not None:
                let_go_ahead(self.limit)   # one taken ahead that no shard needed (all were done)
        with self._counting:
            self.runs += runs
            self.shards += len(shards)
        missing = [s for s in shards if not (self.folder / s / "scores.parquet").is_file()]
        if missing:
            raise FileNotFoundError(f"{len(missing)} metric shard(s) have no scores, e.g. {missing[0]}")
        return merge_results([read_shard(self.folder / s, resources.log) for s in shards])

    def details(self) -> dict[str, Any]:
        """The stage summary's counts of metric shards."""
        return {"metric_shards": self.shards,
                "metric_shards_scored": sum(r["status"] == "scored" for r in self.runs),
                "metric_shards_skipped": sum(r["status"] == "skipped" for r in self.runs)}
