"""Log-likelihood requests as Parquet shards, one Prefect task per shard, resumable.

    score/requests/<shard>.parquet   LOGLIK_REQUESTS: key, system, user, continuation
    score/results/<shard>.parquet    LOGLIK_RESULTS: key, logprob, n_tokens, truncated

A shard's name hashes the keys it holds, so the same requests always give the same shards. A request
whose key already has a result (in any shard of `results/`) is never sent again: its result is reused
bit for bit, so adding a model to a scored pipeline scores only the new requests and leaves the old
ones out of the new batches (a result depends on its batch company: padding, and bfloat16 rounding by
up to a tenth of a nat: a new model once moved the old ones' scores). Files
are written atomically (a temporary file renamed into place): a results file exists only when the
shard is complete, and a shard with results is skipped, so a crashed run resumes where it stopped.
`ShardedLoglikelihood` is the `loglikelihood` resource the metrics call; how its shards run (in
this process, or fanned out as Prefect tasks behind a concurrency limit) is its `run` argument.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from tasks.core.config import Config, ScoreConfig
from tasks.core.layout import write_parquet
from tasks.core.schema import LOGLIK_RESULTS, with_truncated
from tasks.core.slots import SlotLimit
from tasks.lm import ModelSpec
from tasks.lm.devices import where_this_runs
from tasks.metrics.resources import engine_loglikelihood

CONCURRENCY_LIMIT = "grebench-eval-lm"
# Dask settings for the workers GRE-bench starts. A worker samples every thread's stack with
# sys._current_frames() to build its profile; on CPython before 3.11.9 a garbage collection inside that
# call can close a file or database connection, which lets go of the GIL while the interpreter's
# thread-list lock is held, and a thread starting at that moment deadlocks the process
# (python/cpython#106883). The profile is only seen on Dask's dashboard, which GRE-bench does not open.
DASK_SETTINGS = {"distributed.worker.profile.enabled": False}

# (requests_dir, results_dir, shard names, spec, token_budget) -> one status dict per shard
ShardRunner = Callable[[Path, Path, list[str], ModelSpec, int], list[dict]]


def write_request_shards(requests: pl.DataFrame, folder: Path, shard_size: int, pieces: int | None = None
                         ) -> list[str]:
    """Write the requests as shards of `shard_size` (prompts kept together for prefix reuse); their names.
    With `pieces`: shards of about 1/`pieces` of the requests each (at most `shard_size`), cut only where
    the prompt changes (a prompt is computed once per shard)."""
    ordered = requests.unique("key").sort("system", "user", "continuation", "key")
    cuts = list(range(0, ordered.height, shard_size))
    if pieces and ordered.height:
        target = min(shard_size, -(-ordered.height // pieces))
        starts = (pl.struct("system", "user") != pl.struct("system", "user").shift(1)).fill_null(True)
        prompt_starts = ordered.select(starts.arg_true())[:, 0].to_list()
        cuts = [0]
        for at in prompt_starts[1:]:
            if at - cuts[-1] >= target:
                cuts.append(at)
        cuts = [c for start, end in zip(cuts, [*cuts[1:], ordered.height], strict=True)
                for c in range(start, end, shard_size)]   # no shard over shard_size, even a prompt's
    names = []
    for offset, end in zip(cuts, [*cuts[1:], ordered.height] if cuts else [], strict=True):
        shard = ordered.slice(offset, end - offset)
        name = "shard-" + hashlib.sha256("\n".join(shard["key"]).encode()).hexdigest()[:16]
        path = folder / f"{name}.parquet"
        if not path.is_file():
            write_parquet(shard, path)
        names.append(name)
    return names


def score_shard(requests_dir: Path, results_dir: Path, shard: str, spec: ModelSpec, token_budget: int) -> dict:
    """Score one shard and write its results; a shard already done is skipped."""
    out = Path(results_dir) / f"{shard}.parquet"
    if out.is_file():
        return {"shard": shard, "status": "skipped", "requests": 0, "seconds": 0.0}
    frame = pl.read_parquet(Path(requests_dir) / f"{shard}.parquet")
    started, since = time.perf_counter(), time.time()
    results = engine_loglikelihood(spec, token_budget)(frame)
    seconds = time.perf_counter() - started
    write_parquet(results, out)
    return {"shard": shard, "status": "scored", "requests": frame.height, "seconds": round(seconds, 3),
            "started": since, "ended": time.time(), **where_this_runs(spec.resolved().device)}


def run_in_process(requests_dir: Path, results_dir: Path, shards: list[str], spec: ModelSpec,
                   token_budget: int) -> list[dict]:
    """Score the shards one after the other in this process."""
    return [score_shard(requests_dir, results_dir, name, spec, token_budget) for name in shards]


def known_results(results_dir: Path, keys: pl.Series) -> pl.DataFrame:
    """LOGLIK_RESULTS already computed for `keys`, from every finished shard (one row per key: the
    first shard in name order wins should an older layout have scored a key twice)."""
    files = sorted(Path(results_dir).glob("*.parquet"))
    if not files or keys.is_empty():
        return pl.DataFrame(schema=LOGLIK_RESULTS)
    frames = [with_truncated(pl.read_parquet(f)).select(LOGLIK_RESULTS.names()).cast(dict(LOGLIK_RESULTS))
              for f in files]
    return pl.concat(frames).filter(pl.col("key").is_in(keys.implode())).unique("key", keep="first",
                                                                                   maintain_order=True)


def read_results(results_dir: Path, shards: list[str]) -> pl.DataFrame:
    """All results of the given shards; a missing shard is an error (the run is not complete)."""
    missing = [s for s in shards if not (Path(results_dir) / f"{s}.parquet").is_file()]
    if missing:
        raise FileNotFoundError(f"{len(missing)} shard(s) have no results, e.g. {missing[0]}")
    if not shards:
        return pl.DataFrame(schema=LOGLIK_RESULTS)
    frames = [with_truncated(pl.read_parquet(Path(results_dir) / f"{s}.parquet")) for s in shards]
    return pl.concat(frames, how="diagonal_relaxed").select(LOGLIK_RESULTS.names()).cast(dict(LOGLIK_RESULTS))


class ShardedLoglikelihood:
    """LOGLIK_REQUESTS -> LOGLIK_RESULTS through shards under `folder` (requests/, results/).

    Results already computed are reused (`known_results`) and only the other requests are cut into
    shards; `runs` collects the status of every shard run, and `requests` / `shards` / `reused` count
    what the calls asked for (for the stage summary)."""

    def __init__(self, folder: Path, spec: ModelSpec, token_budget: int, shard_size: int,
                 run: ShardRunner = run_in_process) -> None:
        self.folder, self.spec, self.token_budget, self.shard_size, self.run = (
            Path(folder), spec, token_budget, shard_size, run)
        self.runs: list[dict] = []
        self.requests = self.shards = self.reused = 0
        self._counting = threading.Lock()    # two threads may call (the score stage's injection track)
        # key -> (its shards, set when they are done) for the calls scoring now: a key another thread is
        # scoring is waited for, not scored twice (the marginals of references two calls share)
        self._flight: dict[str, tuple[tuple[str, ...], threading.Event]] = {}

    def __call__(self, requests: pl.DataFrame, pieces: int | None = None) -> pl.DataFrame:
        """The results of `requests`; with `pieces`, the new ones cut into about that many shards between
        prompts (each at most `shard_size`), so that several slots share a job."""
        results = self.folder / "results"
        results.mkdir(parents=True, exist_ok=True)
        with self._counting:
            known = known_results(results, requests["key"].unique())
            todo = requests.filter(~pl.col("key").is_in(known["key"].implode()))
            elsewhere = {self._flight[k] for k in todo["key"].unique().to_list() if k in self._flight}
            mine = todo.filter(~pl.col("key").is_in(list(self._flight)))
            names = write_request_shards(mine, self.folder / "requests", self.shard_size, pieces)
            flying, done = mine["key"].unique().to_list(), threading.Event()
            self._flight.update(dict.fromkeys(flying, (tuple(names), done)))
        try:
            runs = self.run(self.folder / "requests", results, names, self.spec, self.token_budget)
        finally:
            with self._counting:
                for key in flying:
                    self._flight.pop(key, None)
            done.set()
        for _, finished in elsewhere:
            finished.wait()
        with self._counting:
            self.runs += runs
            self.requests, self.shards = self.requests + requests.height, self.shards + len(names)
            self.reused += known.height
        shards = [*names, *(name for theirs, _ in elsewhere for name in theirs)]
        new = read_results(results, list(dict.fromkeys(shards))).filter(pl.col("key").is_in(todo["key"].implode()))
        return pl.concat([known, new]).unique("key", keep="first", maintain_order=True)


def eval_lm_slots(cfg: Config) -> SlotLimit | None:
    """The evaluation-LM concurrency limit the scoring tasks occupy on the thread runner: `[score]
    gpu_concurrency` slot files under <data_dir>/slots, freed by the kernel when a holder dies
    (tasks/core/slots.py). None on a Dask cluster, whose `GPU` worker resources bound them on every
    machine (tasks/scoring/cluster.py)."""
    if cfg.score.task_runner == "dask":
        return None
    return SlotLimit(cfg.data_dir / "slots", CONCURRENCY_LIMIT, cfg.score.gpu_concurrency, cfg.score.slot_wait_s)


def make_task_runner(cfg: ScoreConfig) -> Any:
    """The task runner named in the config: threads here, or a Dask cluster: an existing one
    (`runner_address`), or one started here with a worker per GPU (`cuda_devices`, else every GPU this
    process sees; on a CPU, `workers` of them: tasks/scoring/cluster.py)."""
    if cfg.task_runner == "thread":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=max(cfg.workers, cfg.gpu_concurrency))
    import dask
    from prefect_dask import DaskTaskRunner

    from tasks.lm.devices import visible_devices
    from tasks.scoring.cluster import local_cluster

    dask.config.set(DASK_SETTINGS)   # read by the local workers when the flow starts them (not by a remote cluster)
    if cfg.runner_address:
        return DaskTaskRunner(address=cfg.runner_address)
    # one worker per GPU (each seeing its own alone), else `workers` of them; each holds one GPU resource
    devices = list(cfg.cuda_devices) or visible_devices()
    return DaskTaskRunner(cluster_class=local_cluster, cluster_kwargs={"devices": devices, "workers": cfg.workers})
