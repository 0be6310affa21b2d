"""Concurrency limits that die with their holder: N slot files, each held with `fcntl.flock`.

A limit of N slots named `grebench-eval-lm` is the files `<folder>/grebench-eval-lm.slot-<i>` for
i < N. Taking a slot is an exclusive, non-blocking `flock` on one of them; the kernel lets go of it
when the holder's file is closed, which happens however the process ends (kill -9 and the OOM
killer included), so a dead holder never keeps a slot. (Prefect's global concurrency limits, used
before, live in Prefect's database and outlived a killed holder: every later run waited forever.)

The holder writes its pid, command line and start time into the slot file, so a wait that runs out
(`wait_s`) names who holds the slots, in one line. The lock is advisory and per open file: two
threads of one process taking slots each open their own file and exclude each other as processes do.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from tasks.core.errors import GrebenchError

POLL_S = 0.2


class SlotTimeout(GrebenchError, TimeoutError):
    """No slot of a concurrency limit came free within the wait: one line naming the holders."""


@dataclass(frozen=True)
class SlotLimit:
    """A limit of `slots` holders at once, kept as files under `folder`; a wait lasts `wait_s` at most."""

    folder: Path
    name: str
    slots: int
    wait_s: float

    def paths(self) -> list[Path]:
        return [Path(self.folder) / f"{self.name}.slot-{i}" for i in range(self.slots)]


def holder_line() -> str:
    """Who this process is, as written into a slot it holds: pid, command, start time."""
    command = " ".join(sys.argv)[:300].replace("\n", " ")
    return f"pid={os.getpid()} since={datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ} command={command}\n"


def try_slot(path: Path) -> int | None:
    """An open descriptor of `path` holding its exclusive lock, or None when another holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def first_free(limit: SlotLimit) -> tuple[int, int] | None:
    """(slot number, held descriptor) of the first free slot of `limit`, or None when all are held."""
    for number, path in enumerate(limit.paths()):
        fd = try_slot(path)
        if fd is not None:
            return number, fd
    return None


def holders(limit: SlotLimit) -> list[str]:
    """What the slot files say of their holders (the line each holder wrote), for a message."""
    found = []
    for path in limit.paths():
        try:
            text = path.read_text(errors="replace").strip()
        except OSError:
            continue
        if text:
            found.append(text.splitlines()[0])
    return found


def wait_message(limit: SlotLimit) -> str:
    held = "; ".join(holders(limit)) or "holder unknown"
    return (f"no slot of the concurrency limit {limit.name!r} ({limit.slots} slot(s), {limit.folder}) came free "
            f"within {limit.wait_s:g} s; held by {held}. Wait for it, stop it, or raise [score] slot_wait_s")


def _wait_for_slot(limit: SlotLimit) -> tuple[int, int]:
    """(number, held descriptor) of a slot of `limit`; wait at most `limit.wait_s`, then SlotTimeout."""
    Path(limit.folder).mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + limit.wait_s
    while (taken := first_free(limit)) is None:
        if time.monotonic() >= deadline:
            raise SlotTimeout(wait_message(limit))
        time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
    return taken


# slots taken ahead (`take_ahead`) and not yet claimed, per limit: (number, descriptor)
_AHEAD: dict[str, list[tuple[int, int]]] = {}
_AHEAD_LOCK = threading.Lock()


def _ahead_key(limit: SlotLimit) -> str:
    return str(Path(limit.folder) / limit.name)


def take_ahead(limit: SlotLimit) -> None:
    """Take one slot of `limit` now (waiting as `holding_slot` does) for the next `holding_slot(limit,
    ahead=True)` in this process, from any thread, which holds it from there on. A long job that starts a
    moment later in another thread (a Prefect subflow) so gets its slot before short jobs started
    meanwhile fill every slot, and waits for none of them. `let_go_ahead` frees one nobody claimed."""
    taken = _wait_for_slot(limit)
    with _AHEAD_LOCK:
        _AHEAD.setdefault(_ahead_key(limit), []).append(taken)


def let_go_ahead(limit: SlotLimit) -> None:
    """Free the slots of `limit` taken ahead that no holder claimed (their job needed none: it was done)."""
    with _AHEAD_LOCK:
        unclaimed = _AHEAD.pop(_ahead_key(limit), [])
    for _, fd in unclaimed:
        os.close(fd)


@contextmanager
def holding_slot(limit: SlotLimit, ahead: bool = False) -> Iterator[int]:
    """Hold one slot of `limit` (its number) for the body; wait at most `limit.wait_s`, then SlotTimeout.
    `ahead`: the slot taken ahead for this job (`take_ahead`) when there is one."""
    taken = None
    if ahead:
        with _AHEAD_LOCK:
            waiting = _AHEAD.get(_ahead_key(limit))
            taken = waiting.pop(0) if waiting else None
    number, fd = taken if taken is not None else _wait_for_slot(limit)
    try:
        with contextlib.suppress(OSError):   # who holds it is for messages only (a full disk still works)
            os.ftruncate(fd, 0)
            os.pwrite(fd, holder_line().encode(), 0)
        yield number
    finally:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)
