"""Child processes: the PDF readers' and the one that keeps heavy imports out of a run.

The PDF readers (tasks/stages/ingest/pdf.py) each run in a child under memory, time and page limits, forked
from a server process (multiprocessing's "forkserver": safe in a threaded parent, unlike a plain fork) that
imports the reader (pymupdf, about 3 s) once, so each child starts at once. Nothing else is preloaded there:
a child's memory limit counts every page it inherits.

A Python process never gives back the memory of a module it imported. The curated tables' checks import
great-expectations (about 2,000 modules and 0.24 GB resident), which a run would carry under every later
stage's peak; they run in `apart()`, one spawned worker kept for the life of the process, so the import is paid
once (in the worker) and never in the run's own process.
"""

from __future__ import annotations

import threading
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from multiprocessing.context import BaseContext

_APART: list[ProcessPoolExecutor] = []
_LOCK = threading.Lock()


def child_context() -> BaseContext:
    """The context the PDF readers' children start from (see the module's note)."""
    context = get_context("forkserver")
    context.set_forkserver_preload(["tasks.stages.ingest.pdf"])
    return context


def apart() -> ProcessPoolExecutor:
    """The worker process for imports the run should not keep, started on first use (spawned: it shares no
    memory with the run)."""
    with _LOCK:
        if not _APART:
            _APART.append(ProcessPoolExecutor(1, mp_context=get_context("spawn")))
        return _APART[0]


def forget_apart() -> None:
    """Drop the worker (after it died): the next `apart()` starts a new one."""
    with _LOCK:
        while _APART:
            _APART.pop().shutdown(wait=False, cancel_futures=True)
