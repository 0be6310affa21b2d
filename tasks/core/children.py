"""The worker process that keeps heavy imports out of a run.

A Python process never gives back the memory of a module it imported. The curated tables' checks import
great-expectations (about 2,000 modules and 0.24 GB resident) and ROUGE-L's Porter stemmer imports all of nltk,
which brings scikit-learn and pandas (about 0.1 GB more); a run would carry both under every later stage's peak.
They run in `apart()`, one spawned worker kept for the life of the process, so each import is paid once (in the
worker) and never in the run's own process. (The PDF readers' children start from a forkserver of
their own, tasks/stages/ingest/pdf.py: nothing heavy may be preloaded there, since a reader's memory limit counts
every page it inherits.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from typing import Any

from tasks.core.errors import TransientError

_APART: list[ProcessPoolExecutor] = []
_LOCK = threading.Lock()


def apart() -> ProcessPoolExecutor:
    """The worker process for imports the run should not keep, started on first use (spawned: it shares no
    memory with the run)."""
    with _LOCK:
        if not _APART:
            _APART.append(ProcessPoolExecutor(1, mp_context=get_context("spawn")))
        return _APART[0]


def _forget_apart() -> None:
    """Drop the worker (after it died): the next `apart()` starts a new one."""
    with _LOCK:
        while _APART:
            _APART.pop().shutdown(wait=False, cancel_futures=True)


def call_apart(what: str, function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)` in the worker (both picklable); its own exceptions come back as they are. A worker that
    dies (killed, out of memory) is a one-line TransientError naming `what`, and the next call starts a new one."""
    try:
        return apart().submit(function, *args).result()
    except BrokenProcessPool as error:
        _forget_apart()
        raise TransientError(f"{what} ended without an answer (its worker process died: killed or out of memory); "
                             f"run again") from error
