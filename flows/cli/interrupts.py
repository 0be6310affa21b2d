"""Ctrl-C and SIGTERM end any `grebench` command within seconds, with exit 130 / 143 and one line.

The first signal raises `Stopped` (a KeyboardInterrupt) in the main thread, so the command unwinds
as after Ctrl-C: locks released, temp files dropped, Prefect told. A command whose main thread
cannot unwind in time (it waits on a worker thread stuck in a read, or on a C call) is ended
`GRACE_SECONDS` after the signal by a watcher thread that learns of it from the signal wake-up fd
(which works whatever the main thread is doing); a second signal ends it at once. Nothing
half-written stays behind either way: every output file is written whole to a temp file and
renamed (tasks/core/locks.py `write_atomic`), and the child processes this command started (PDF
readers, the Prefect server's launcher) are ended with it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading

GRACE_SECONDS = 5.0
EXITS = {signal.SIGINT: (130, "interrupted (Ctrl-C)"), signal.SIGTERM: (143, "stopped (SIGTERM)")}
NOTHING_LOST = "nothing half-written was kept; a rerun resumes"


class Stopped(KeyboardInterrupt):
    """The command was asked to stop by a signal; `code` is its exit status (130 / 143)."""

    def __init__(self, code: int, what: str) -> None:
        super().__init__(what)
        self.code, self.what = code, what


_installed = False
_seen: list[int] = []


def install() -> None:
    """Catch SIGINT and SIGTERM as the module docstring says (main thread only; idempotent)."""
    global _installed
    if _installed or threading.current_thread() is not threading.main_thread():
        return
    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    for number in EXITS:
        signal.signal(number, _raise)
    threading.Thread(target=_watch, args=(read,), name="grebench-signals", daemon=True).start()
    _installed = True


def _raise(number: int, frame: object) -> None:
    code, what = EXITS[signal.Signals(number)]
    raise Stopped(code, what)


def _watch(fd: int) -> None:
    """Learn of each signal from the wake-up fd: the first starts the grace period, a second ends now."""
    while True:
        try:
            data = os.read(fd, 64)
        except OSError:
            return
        for number in data:
            if number not in EXITS:
                continue
            _seen.append(number)
            if len(_seen) == 1:
                threading.Timer(GRACE_SECONDS, end_now, args=(number,)).start()
            else:
                end_now(number)


def end_on_signal() -> None:
    """From now on a signal ends the process at once with its line (used once the command's work is done,
    while the interpreter runs its exit hooks, where a raised `Stopped` would only be reported as ignored)."""
    if threading.current_thread() is threading.main_thread():
        for number in EXITS:
            signal.signal(number, lambda number, frame: end_now(number))


def end_children() -> None:
    """End the child processes this command started (PDF readers and the like)."""
    for child in multiprocessing.active_children():
        with contextlib.suppress(Exception):
            child.kill()


def end_now(number: int) -> None:
    """Exit at once with the signal's status and one line (the grace period is over)."""
    code, what = EXITS[signal.Signals(number)]
    end_children()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        print(f"error: {what}; {NOTHING_LOST}", file=sys.stderr, flush=True)
    os._exit(code)
