"""The score stage's jobs that need none of the scores (the reference flags) follow the paper shards in
their thread when those run beside GEM's shards, once, whatever the number of evaluation LMs."""

from __future__ import annotations

import threading

import polars as pl

from tasks.metrics.registry import FamilyResult
from tasks.stages.score.steps import ShardsThen


class Shards:
    """Paper shards that record the thread each call ran in."""

    def __init__(self, beside: bool) -> None:
        self.beside, self.threads = beside, []

    def __call__(self, metrics, candidates, references, synopses, negatives, resources) -> FamilyResult:
        self.threads.append(threading.current_thread().name)
        return FamilyResult(pl.DataFrame({"metric": list(metrics)}), {})


def test_the_job_follows_the_shards_in_their_thread_once_and_its_result_is_kept() -> None:
    shards, ran = Shards(beside=True), []

    def flags() -> dict:
        ran.append(threading.current_thread().name)
        return {"reference_flags": {"references": len(ran)}}

    then = ShardsThen(shards, flags)
    assert then.beside
    worker = threading.Thread(target=lambda: [then(["a"], None, None, None, None, None) for _ in range(2)],
                              name="paper-shards")
    worker.start()
    worker.join()
    assert shards.threads == ["paper-shards", "paper-shards"]      # one call per evaluation LM
    assert ran == ["paper-shards"]                                  # the job once, after the first
    assert then.after() == {"reference_flags": {"references": 1}} and ran == ["paper-shards"]


def test_without_shards_the_job_runs_when_its_result_is_asked_for() -> None:
    ran = []
    then = ShardsThen(Shards(beside=False), lambda: ran.append(1) or "flags")
    assert not then.beside and ran == []
    assert then.after() == "flags" and then.after() == "flags" and ran == [1]
