"""Local generation threads: the cores available to the process, or GREBENCH_LOCAL_THREADS."""

from __future__ import annotations

import os

import pytest

from tasks.lm.local import available_cores, generation_threads


def test_threads_are_the_cores_the_process_may_run_on(monkeypatch):
    monkeypatch.delenv("GREBENCH_LOCAL_THREADS", raising=False)
    assert generation_threads() == available_cores() >= 1
    if hasattr(os, "sched_getaffinity"):
        assert available_cores() == len(os.sched_getaffinity(0))


def test_a_busy_machine_does_not_lower_the_thread_count(monkeypatch):
    """The load average (which counts this process's own previous stage) is not read."""
    monkeypatch.delenv("GREBENCH_LOCAL_THREADS", raising=False)
    before = generation_threads()
    monkeypatch.setattr(os, "getloadavg", lambda: (64.0, 64.0, 64.0), raising=False)
    assert generation_threads() == before


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity")
def test_a_narrower_affinity_gives_fewer_threads(monkeypatch):
    monkeypatch.delenv("GREBENCH_LOCAL_THREADS", raising=False)
    cores = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(cores)})
        assert generation_threads() == 1
    finally:
        os.sched_setaffinity(0, cores)
    assert generation_threads() == len(cores)


def test_the_environment_fixes_the_count(monkeypatch):
    monkeypatch.setenv("GREBENCH_LOCAL_THREADS", "3")
    assert generation_threads() == 3
    monkeypatch.setenv("GREBENCH_LOCAL_THREADS", "0")
    assert generation_threads() == 1


def test_decoding_steps_may_run_on_their_own_thread_count(monkeypatch):
    from tasks.lm.local import decode_threads

    monkeypatch.delenv("GREBENCH_DECODE_THREADS", raising=False)
    assert decode_threads() is None                  # default: the steps run like the prompts
    monkeypatch.setenv("GREBENCH_DECODE_THREADS", "1")
    assert decode_threads() == 1
    monkeypatch.setenv("GREBENCH_DECODE_THREADS", "0")
    assert decode_threads() == 1


def test_a_section_of_jobs_side_by_side_splits_the_cores_for_every_thread_and_sets_torch_back(monkeypatch):
    """Two candidates decoding at once get half the cores each, in their own threads, whenever they run
    (the split is the configured one, never how many happen to run); after the section torch's count is
    what it was, also where a worker thread moved torch's process-wide count."""
    import threading

    import torch

    from tasks.lm.local import sharing_cores, torch_threads

    monkeypatch.setenv("GREBENCH_LOCAL_THREADS", "4")
    before = torch.get_num_threads()
    seen = []

    def job() -> None:
        with torch_threads(generation_threads()):
            seen.append((generation_threads(), torch.get_num_threads()))

    with sharing_cores(2):
        first = threading.Thread(target=job)
        first.start()
        first.join()                         # alone for now: still half the cores
        pair = [threading.Thread(target=job) for _ in range(2)]
        for worker in pair:
            worker.start()
        for worker in pair:
            worker.join()
    assert seen == [(2, 2)] * 3
    assert generation_threads() == 4 and torch.get_num_threads() == before
    checked = []
    later = threading.Thread(target=lambda: checked.append(torch.get_num_threads()))
    later.start()
    later.join()
    assert checked == [before], "a thread started after the section inherits the count of before it"
    monkeypatch.setenv("GREBENCH_LOCAL_THREADS", "1")
    with sharing_cores(3):
        assert generation_threads() == 1                 # never below one thread


def test_lanes_take_the_next_job_when_free_on_half_the_cores_each(monkeypatch):
    """Two lanes side by side: while one lane holds a long job, the other takes every job after it; each
    call runs on half the cores, and the results come back in the jobs' order."""
    import threading

    from tasks.lm.local import in_lanes

    monkeypatch.setenv("GREBENCH_LOCAL_THREADS", "4")
    shorts_done = threading.Event()
    seen: list[tuple[str, str, int]] = []

    def run(job: str, model: str) -> str:
        if job == "long":
            assert shorts_done.wait(30), "the other lane did not take the short jobs"
        seen.append((job, model, generation_threads()))
        if sum(j.startswith("short") for j, _, _ in seen) == 3:
            shorts_done.set()
        return f"{job}@{model}"

    out = in_lanes(["long", "short-1", "short-2", "short-3"], ["a", "b"], run)
    assert out == ["long@a", "short-1@b", "short-2@b", "short-3@b"]
    assert {threads for _, _, threads in seen} == {2}
    assert generation_threads() == 4


def test_a_failing_job_fails_the_lanes_and_one_model_runs_the_jobs_in_order():
    from tasks.lm.local import in_lanes

    def run(job: int, model: str) -> int:
        if job == 0:
            raise ValueError("bad job")
        return job

    with pytest.raises(ValueError, match="bad job"):
        in_lanes([0, 1, 2, 3, 4, 5], ["a", "b"], run)
    assert in_lanes([3, 1, 2], ["only"], lambda job, model: (job, model)) == [(3, "only"), (1, "only"), (2, "only")]


def test_lane_parts_are_a_batch_at_most_and_give_every_lane_work():
    from tasks.lm.local import lane_parts

    assert [len(p) for p in lane_parts(10, 2, 8)] == [5, 5]
    assert [len(p) for p in lane_parts(60, 2, 8)] == [8] * 7 + [4]
    assert [list(p) for p in lane_parts(3, 2, 8)] == [[0, 1], [2]]
    assert lane_parts(0, 2, 8) == [] and [len(p) for p in lane_parts(5, 1, 2)] == [2, 2, 1]
