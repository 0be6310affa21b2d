"""Polite request pacing for the OpenReview API, per endpoint: requests, histories and PDFs.

OpenReview limits each endpoint on its own (docs/openreview.md): API requests per window, the
revision histories (`/notes/edits`) far tighter, PDFs a few dozen an hour. `RateLimit` spaces
calls evenly, `period / rate` apart, across all threads that share it, so the workers together
stay under the limit instead of each one hitting 429 and backing off. A rate of 0 means no limit.
`Throttle` holds the limits of one client: every request takes an API slot, a history request
(`/notes/edits`, `/references`) also an edits slot, a PDF download (endpoint /pdf or /attachment)
also a PDF slot.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tasks.core.config import IngestConfig

log = logging.getLogger(__name__)
PDF_ENDPOINTS = ("pdf", "attachment")   # the last path segment of a file download
EDIT_ENDPOINTS = ("edits", "references")   # revision histories (v2 / v1)


@dataclass
class RateLimit:
    """At most `rate` calls per `period` seconds, evenly spaced (0: unlimited); thread-safe."""

    rate: float
    period: float
    name: str = "requests"
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    waited: float = 0.0                       # seconds spent waiting, for the logs and tests
    _next: float = field(default=float("-inf"), repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def acquire(self) -> float:
        """Wait for the next slot; returns the seconds waited."""
        if self.rate <= 0:
            return 0.0
        with self._lock:
            now = self.clock()
            start = max(now, self._next)
            self._next = start + self.period / self.rate
            wait = start - now
            self.waited += wait
        if wait > 0:
            if wait >= 5:
                log.info("throttle: waiting %.0f s for the next %s slot (%g per %g s)", wait, self.name,
                         self.rate, self.period)
            self.sleep(wait)
        return wait


@dataclass
class Throttle:
    """The API and PDF limits of one OpenReview client."""

    api: RateLimit
    pdfs: RateLimit
    edits: RateLimit = field(default_factory=lambda: RateLimit(0, 60.0, "history request"))

    @classmethod
    def from_config(cls, cfg: IngestConfig, logged_in: bool | None = None) -> Throttle:
        """Guest limits, or the logged-in ones when OPENREVIEW_TOKEN or _USERNAME is set."""
        if logged_in is None:
            logged_in = bool(os.environ.get("OPENREVIEW_TOKEN") or os.environ.get("OPENREVIEW_USERNAME"))
        per_minute = cfg.logged_in_requests_per_minute if logged_in else cfg.requests_per_minute
        per_hour = cfg.logged_in_pdfs_per_hour if logged_in else cfg.pdfs_per_hour
        return cls(RateLimit(per_minute, 60.0, "API request"), RateLimit(per_hour, 3600.0, "PDF"),
                   RateLimit(cfg.edits_per_minute, 60.0, "history request"))

    def before(self, path: str) -> None:
        """Wait for the slots a request to `path` needs."""
        segments = path.split("?")[0].rstrip("/").rsplit("/", 2)
        if segments[-1] in PDF_ENDPOINTS:
            self.pdfs.acquire()
        elif segments[-1] in EDIT_ENDPOINTS:
            self.edits.acquire()
        self.api.acquire()
