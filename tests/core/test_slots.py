"""Concurrency slots that die with their holder (tasks/core/slots.py): a slot a kill -9 left is free at
once, a wait is bounded and names the holder in one line, N slots admit N holders."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tasks.core.slots import SlotLimit, SlotTimeout, holding_slot

ROOT = Path(__file__).resolve().parents[2]
HOLD = """
import sys, time
from pathlib import Path
from tasks.core.slots import SlotLimit, holding_slot
with holding_slot(SlotLimit(Path(sys.argv[1]), "grebench-eval-lm", 1, 5.0)):
    print("holding", flush=True)
    time.sleep(600)
"""


def start_holder(folder: Path) -> subprocess.Popen[str]:
    """A child process holding the one slot of the limit under `folder` (it says so, then sleeps)."""
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "holding"
    return child


def test_a_slot_held_by_a_killed_process_is_free_at_once(tmp_path):
    child = start_holder(tmp_path)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    started = time.monotonic()
    with holding_slot(SlotLimit(tmp_path, "grebench-eval-lm", 1, 5.0)) as number:
        assert number == 0
    assert time.monotonic() - started < 1.0


def test_a_bounded_wait_names_the_holder_in_one_line(tmp_path):
    child = start_holder(tmp_path)
    try:
        started = time.monotonic()
        with pytest.raises(SlotTimeout) as error, holding_slot(SlotLimit(tmp_path, "grebench-eval-lm", 1, 0.5)):
            pass
        assert 0.4 < time.monotonic() - started < 5.0
        message = str(error.value)
        assert f"pid={child.pid}" in message and "grebench-eval-lm" in message and "slot_wait_s" in message
        assert "\n" not in message
    finally:
        child.kill()
        child.wait(timeout=30)


def test_n_slots_admit_n_holders_and_free_on_exit(tmp_path):
    limit = SlotLimit(tmp_path, "lm", 2, 0.2)
    with holding_slot(limit) as first, holding_slot(limit) as second:
        assert {first, second} == {0, 1}
        with pytest.raises(SlotTimeout, match=f"pid={os.getpid()}"), holding_slot(limit):
            pass
    with holding_slot(limit) as again:
        assert again == 0



def test_a_slot_taken_ahead_goes_to_the_job_it_was_taken_for_and_is_let_go_unclaimed(tmp_path):
    """A long job started in another thread a moment later gets the slot taken ahead for it, whatever
    short jobs started meanwhile; a plain holder cannot take it, and one nobody claimed comes free."""
    import threading

    from tasks.core.slots import let_go_ahead, take_ahead

    limit = SlotLimit(tmp_path, "lm", 2, 0.3)
    take_ahead(limit)
    with holding_slot(limit) as short:
        with pytest.raises(SlotTimeout), holding_slot(limit):   # the other slot is kept for the long job
            pass
        seen: dict[str, float] = {}

        def long_job() -> None:
            started = time.monotonic()
            with holding_slot(limit, ahead=True) as number:
                seen["slot"], seen["waited"] = number, time.monotonic() - started
        worker = threading.Thread(target=long_job)
        worker.start()
        worker.join(timeout=5)
        assert seen["slot"] == 1 - short and seen["waited"] < 0.1
    with holding_slot(limit), holding_slot(limit):   # the job let its slot go when it ended
        pass
    take_ahead(limit)
    let_go_ahead(limit)                              # nobody claimed it
    with holding_slot(limit), holding_slot(limit):
        pass
