"""The score flow: shards, crash and resume, the concurrency limit, a two-worker Dask cluster."""

from __future__ import annotations

import threading
import time

import polars as pl
import pytest

import tasks.scoring.shards as shards_module
from flows.score import score_flow
from tasks.core.config import ScoreConfig, load_config
from tasks.core.layout import stage_dir, write_parquet
from tasks.lm import LoglikelihoodRequest, eval_lm
from tasks.metrics import get
from tasks.metrics.gem import build_requests
from tasks.metrics.resources import build_resources, eval_spec
from tasks.scoring.shards import ShardedLoglikelihood, make_task_runner, write_request_shards
from tasks.stages.score.stage import (
    read_inputs,
    score_inputs,
    shard_details,
    sharded_loglikelihood,
    write_scores,
)
from tests.scoring_data import note_shard_workers, write_pipeline


def _score_dir(config):
    return stage_dir(load_config(config), "t", "score")


def _plan(config):
    """(pairs, requests) of the GEM metrics the config names, as the score stage builds them."""
    cfg = load_config(config).for_pipeline("t")
    inputs = read_inputs(cfg, "t")
    return build_requests(inputs.candidates, inputs.references, inputs.synopses, get(cfg.score.metrics),
                          eval_spec(cfg.score).resolved().key)


def score_pipeline(cfg, shards):
    """What the score flow does between reading the inputs and writing the scores, without Prefect."""
    return score_inputs(cfg, read_inputs(cfg, "t"), build_resources(cfg.score, shards))


def _fake_shard(requests_dir, results_dir, shard, spec, token_budget):
    """Score a shard without a model: logprob = -(length of the user turn) / 100, 3 tokens."""
    frame = pl.read_parquet(requests_dir / f"{shard}.parquet")
    write_parquet(frame.select("key", logprob=pl.col("user").str.len_chars().cast(pl.Float64) / -100,
                                            n_tokens=pl.lit(3, pl.Int64)), results_dir / f"{shard}.parquet")
    return {"shard": shard, "status": "scored", "requests": frame.height, "seconds": 0.0}


def test_shards_are_content_addressed_and_stable(tmp_path) -> None:
    config = write_pipeline(tmp_path, n_papers=2, n_reviews=3, metrics=["gem", "gem_s_abstract"], shard_size=7)
    pairs, requests = _plan(config)
    assert pairs.height == 2 * 3 * 2 * 2
    folder = tmp_path / "requests"
    first, again = write_request_shards(requests, folder, 7), write_request_shards(requests.reverse(), folder, 7)
    assert first == again and len(first) == -(-requests.height // 7)
    assert sorted(p.stem for p in folder.glob("*.parquet")) == sorted(first)
    assert sum(pl.read_parquet(p).height for p in folder.glob("*.parquet")) == requests.height


def test_stage_scores_through_resumable_shards_and_writes_a_summary(tmp_path, monkeypatch) -> None:
    config = write_pipeline(tmp_path, n_papers=2, n_reviews=3, metrics=["gem", "gem_s_assw"], baselines=["bleu"],
                            shard_size=5)
    cfg = load_config(config).for_pipeline("t")
    monkeypatch.setattr(shards_module, "score_shard", _fake_shard)
    shards = sharded_loglikelihood(cfg, "t")
    summary = write_scores(cfg, "t", score_pipeline(cfg, shards), shard_details(shards))
    scores = pl.read_parquet(_score_dir(config) / "scores.parquet")
    assert (summary.rows_in, summary.rows_out) == (2 * 3 * 2, 2 * 3 * 2 * 3)   # (candidate, reference) pairs; rows
    assert summary.details["shards_scored"] == summary.details["shards"] == -(-summary.details["requests"] // 5)
    assert set(scores["metric"]) == {"gem", "gem_s_assw", "bleu"} and scores["score"].is_nan().sum() == 0
    assert set(scores.filter(pl.col("metric") == "bleu")["eval_lm"]) == {"sacrebleu"}
    means = pl.read_parquet(_score_dir(config) / "candidate_scores.parquet")
    assert means.height == 2 * 3 * 3 and set(means["n_references"]) == {2}

    monkeypatch.setattr(shards_module, "score_shard", lambda *a: pytest.fail("a finished shard was rescored"))
    again = ShardedLoglikelihood(shards.folder, shards.spec, shards.token_budget, shards.shard_size,
                                 run=lambda req, res, names, spec, budget: [
                                     {"status": "skipped" if (res / f"{n}.parquet").is_file() else "scored"}
                                     for n in names])
    rerun = write_scores(cfg, "t", score_pipeline(cfg, again), shard_details(again))
    assert rerun.details["shards"] == 0 and rerun.details["requests_reused"] == requests_scored(summary) > 0
    assert pl.read_parquet(_score_dir(config) / "scores.parquet").equals(scores)


def test_adding_requests_leaves_earlier_results_bit_for_bit(tmp_path, monkeypatch) -> None:
    """Once, a model added to a scored pipeline moved earlier models' scores, because its requests
    re-cut the shards and an old request's result depends on its batch company (padding; bfloat16 by up
    to 0.12 nats on SmolLM2). Old results are reused; only the new requests are scored."""
    config = write_pipeline(tmp_path, n_papers=3, n_reviews=3, metrics=["gem"], shard_size=4)
    _, requests = _plan(config)
    old, added = requests.head(requests.height - 5), requests.tail(5)
    sent: list[set[str]] = []

    def company_dependent(requests_dir, results_dir, shard, spec, token_budget):
        frame = pl.read_parquet(requests_dir / f"{shard}.parquet")
        sent.append(set(frame["key"]))
        longest = frame["user"].str.len_chars().max()       # as padding to the batch's longest prompt would
        write_parquet(frame.select("key", logprob=pl.col("user").str.len_chars().cast(pl.Float64) / -100 - longest / 1e6,
                                   n_tokens=pl.lit(3, pl.Int64)), results_dir / f"{shard}.parquet")
        return {"shard": shard, "status": "scored", "requests": frame.height, "seconds": 0.0}

    monkeypatch.setattr(shards_module, "score_shard", company_dependent)
    shards = ShardedLoglikelihood(tmp_path / "score", eval_spec(ScoreConfig()), 4096, 4)
    before = shards(old).sort("key")
    sent.clear()
    after = shards(pl.concat([old, added])).sort("key")
    assert set().union(*sent) == set(added["key"])                 # only the new requests were scored
    assert after.filter(pl.col("key").is_in(old["key"].implode())).equals(before)
    assert after.height == requests.height and shards.reused == old.height


def requests_scored(summary) -> int:
    """Requests a run scored itself: asked for, less those reused from earlier shards."""
    return summary.details["requests"] - summary.details["requests_reused"]


def test_task_runner_comes_from_config() -> None:
    from dask import config as dask_config
    from prefect.task_runners import ThreadPoolTaskRunner
    from prefect_dask import DaskTaskRunner

    assert isinstance(make_task_runner(ScoreConfig()), ThreadPoolTaskRunner)
    dask = make_task_runner(ScoreConfig(task_runner="dask", workers=3, cuda_devices=("2", "5")))
    assert isinstance(dask, DaskTaskRunner) and dask.cluster_kwargs == {"devices": ["2", "5"], "workers": 3}
    assert make_task_runner(ScoreConfig(task_runner="dask", runner_address="tcp://h:8786")).address == "tcp://h:8786"
    assert dask_config.get("distributed.worker.profile.enabled") is False, "workers must not sample stacks (3.11 deadlock)"
    with pytest.raises(ValueError, match="task_runner"):
        ScoreConfig(task_runner="ray")


@pytest.mark.slow
def test_crashed_run_resumes_and_writes_each_pair_once(tmp_path, prefect_harness, embedded_lm, monkeypatch):
    config = write_pipeline(tmp_path, n_papers=2, n_reviews=3, metrics=["gem"], shard_size=5, workers=2)
    cfg = load_config(config).for_pipeline("t")
    _, requests = _plan(config)
    planned = write_request_shards(requests, _score_dir(config) / "requests", 5)
    doomed = planned[-1]
    real = shards_module.score_shard
    spans: list[tuple[float, float]] = []
    lock = threading.Lock()

    def crashing(requests_dir, results_dir, shard, spec, token_budget):
        if shard == doomed:
            raise RuntimeError("worker killed")
        start = time.monotonic()
        out = real(requests_dir, results_dir, shard, spec, token_budget)
        with lock:
            spans.append((start, time.monotonic()))
        return out

    monkeypatch.setattr(shards_module, "score_shard", crashing)
    with pytest.raises(Exception, match="worker killed"):
        score_flow(cfg, "t")
    folder = _score_dir(config)
    done = {p.name: p.stat().st_mtime_ns for p in (folder / "results").glob("*.parquet")}
    assert len(done) == len(planned) - 1 and not (folder / "scores.parquet").exists()
    spans.sort()
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False)), "two shards scored at once"

    monkeypatch.undo()
    summary = score_flow(cfg, "t")
    # the finished shards' results are reused; only the doomed shard's requests are cut again, into that shard
    assert summary.details["shards_scored"] == summary.details["shards"] == 1 and summary.details["requests_reused"] > 0
    assert (folder / "results" / f"{doomed}.parquet").is_file()
    assert all((folder / "results" / name).stat().st_mtime_ns == ns for name, ns in done.items())
    scores = pl.read_parquet(folder / "scores.parquet")
    assert scores.height == 2 * 3 * 2 and summary.details["scored_pairs"] == scores.height == summary.rows_out
    assert not scores.select("candidate", "reference", "metric").is_duplicated().any()
    assert scores["score"].is_nan().sum() == 0 and set(scores["eval_lm"]) == {"smollm2|float32|none"}

    # a stored pair equals a fresh computation of its two requests
    pair = _plan(config)[0].row(0, named=True)
    requests = pl.concat(pl.read_parquet(p) for p in (folder / "requests").glob("*.parquet"))
    by_key = {r["key"]: LoglikelihoodRequest(r["system"], r["user"], r["continuation"]) for r in requests.iter_rows(named=True)}
    cond, marg = eval_lm(load_config(config).score).loglikelihood([by_key[pair["cond_key"]], by_key[pair["marg_key"]]])
    row = scores.filter((pl.col("candidate") == pair["candidate"]) & (pl.col("reference") == pair["reference"]))
    assert row["score"][0] == pytest.approx(cond.logprob - marg.logprob, abs=1e-3)

    again = score_flow(cfg, "t")
    assert again.details["shards_scored"] == 0
    assert pl.read_parquet(folder / "scores.parquet").equals(scores)


@pytest.mark.slow
def test_score_flow_on_a_two_worker_dask_cluster(tmp_path, prefect_harness, embedded_lm, dask_cluster, monkeypatch):
    seen = note_shard_workers(tmp_path, monkeypatch)
    config = write_pipeline(tmp_path, n_papers=2, n_reviews=2, metrics=["gem_raw", "gem_s_assw"], shard_size=3,
                            task_runner="dask", runner_address=dask_cluster.scheduler_address, gpu_concurrency=2)
    summary = score_flow(load_config(config).for_pipeline("t"), "t")
    assert summary.details["shards_scored"] == summary.details["shards"] >= 4
    assert len({p.read_text() for p in seen.iterdir()}) == 2, "both dask workers scored shards"
    assert not any("profile" in w.periodic_callbacks for w in dask_cluster.workers.values())
    scores = pl.read_parquet(_score_dir(config) / "scores.parquet")
    assert scores.height == 2 * 2 * 1 * 2 and scores["score"].is_nan().sum() == 0
    means = pl.read_parquet(_score_dir(config) / "candidate_scores.parquet")
    assert means.height == 2 * 2 * 2 and set(means["n_references"]) == {1}


def test_pieces_cut_the_requests_between_prompts(tmp_path) -> None:
    """A small job cut for several slots (the injection track): about 1/pieces of the requests a shard,
    never a prompt split between two shards, never over shard_size."""
    config = write_pipeline(tmp_path, n_papers=2, n_reviews=3, metrics=["gem"], shard_size=7)
    _, requests = _plan(config)
    folder = tmp_path / "requests"
    names = write_request_shards(requests, folder, 100, pieces=3)
    frames = [pl.read_parquet(folder / f"{n}.parquet") for n in names]
    prompts = [set(f.select("system", "user").iter_rows()) for f in frames]
    assert 2 <= len(names) <= 4 and sum(f.height for f in frames) == requests.unique("key").height
    assert sum(map(len, prompts)) == len(set().union(*prompts))          # each prompt in one shard
    capped = write_request_shards(requests, tmp_path / "capped", 2, pieces=3)
    assert max(pl.read_parquet(tmp_path / "capped" / f"{n}.parquet").height for n in capped) <= 2


def test_a_key_another_thread_is_scoring_is_waited_for_not_scored_twice(tmp_path) -> None:
    """The injection track and GEM's shards share the references' marginals: the call that comes second
    while the first is still scoring sends only its own keys and reads the others' results when done."""
    config = write_pipeline(tmp_path, n_papers=2, n_reviews=3, metrics=["gem"], shard_size=100)
    _, requests = _plan(config)
    first, second = requests.head(requests.height * 2 // 3), requests.tail(requests.height * 2 // 3)
    shared = set(first["key"]) & set(second["key"])
    assert shared
    sent: dict[str, set[str]] = {}
    second_sent = threading.Event()

    def run(requests_dir, results_dir, names, spec, token_budget):
        keys = set().union(*(pl.read_parquet(requests_dir / f"{n}.parquet")["key"] for n in names)) if names else set()
        who = threading.current_thread().name
        sent[who] = keys
        if who == "first":
            assert second_sent.wait(10)          # still scoring when the second call comes
        else:
            second_sent.set()
        return [_fake_shard(requests_dir, results_dir, n, spec, token_budget) for n in names]

    shards = ShardedLoglikelihood(tmp_path / "score", eval_spec(ScoreConfig()), 4096, 100, run=run)
    out: dict[str, pl.DataFrame] = {}
    one = threading.Thread(target=lambda: out.update(first=shards(first)), name="first")
    one.start()
    while "first" not in sent:
        time.sleep(0.01)
    two = threading.Thread(target=lambda: out.update(second=shards(second)), name="second")
    two.start()
    one.join(10)
    two.join(10)
    assert sent["first"] == set(first["key"]) and not sent["second"] & shared
    assert set(out["second"]["key"]) == set(second["key"]) and set(out["first"]["key"]) == set(first["key"])
    expected = dict(second.select("key", pl.col("user").str.len_chars().cast(pl.Float64) / -100).iter_rows())
    assert dict(out["second"].select("key", "logprob").iter_rows()) == expected
