"""The real `openreview-py` clients, configured for bulk, polite, resumable downloads.

The clients' own requests session is kept; its transport is replaced by one that applies our
settings from `[ingest]`: a timeout on every request, and retries with back-off on 429, 5xx,
timeouts and dropped connections. The first back-off is `backoff_seconds` and doubles per attempt
up to `max_backoff_seconds`; a Retry-After header longer than that wait is honoured (capped at
`max_backoff_seconds`). Once retries are exhausted the error surfaces (`requests.RetryError`,
`requests.ConnectionError`), so a rerun resumes from the cached pages.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import openreview
import requests
from openreview.api import OpenReviewClient
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from tasks.core.config import IngestConfig
from tasks.core.retry import register_transient
from tasks.stages.ingest.throttle import Throttle

log = logging.getLogger(__name__)
RETRY_STATUSES = (429, 500, 502, 503, 504)


class Backoff(Retry):
    """urllib3 retry policy: exponential back-off from the first retry, at least Retry-After."""

    def get_backoff_time(self) -> float:
        if not self.history:
            return 0.0
        return float(min(self.backoff_max, self.backoff_factor * 2 ** (len(self.history) - 1)))

    def sleep(self, response: Any = None) -> None:
        retry_after = self.get_retry_after(response) if response is not None else None
        wait = max(retry_after or 0.0, self.get_backoff_time())
        if wait > 0:
            time.sleep(wait)

    def increment(self, method: str | None = None, url: str | None = None, response: Any = None,
                  error: Exception | None = None, *args: Any, **kwargs: Any) -> Retry:
        cause = f"status {response.status}" if response is not None else f"{type(error).__name__}"
        log.warning("retrying %s %s after %s", method, url, cause)
        return super().increment(method, url, response, error, *args, **kwargs)


class TimeoutAdapter(HTTPAdapter):
    """An HTTPAdapter that applies a default timeout to requests that set none, and the request
    pacing of `throttle` (requests per minute, PDFs per hour) when given."""

    def __init__(self, timeout: float, throttle: Throttle | None = None, **kwargs: Any) -> None:
        self.timeout = timeout
        self.throttle = throttle
        super().__init__(**kwargs)

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
        if self.throttle is not None:
            self.throttle.before(request.path_url)
        if kwargs.get("timeout") is None:
            kwargs["timeout"] = self.timeout
        return super().send(request, *args, **kwargs)


def retry_policy(cfg: IngestConfig) -> Backoff:
    return Backoff(
        total=cfg.max_retries, connect=cfg.max_retries, read=cfg.max_retries, status=cfg.max_retries,
        other=0, backoff_factor=cfg.backoff_seconds, backoff_max=cfg.max_backoff_seconds,
        retry_after_max=max(1, int(cfg.max_backoff_seconds)), status_forcelist=RETRY_STATUSES,
        respect_retry_after_header=True, raise_on_status=True, allowed_methods=frozenset({"GET", "HEAD"}),
    )


def make_client(api_version: int, baseurl: str, cfg: IngestConfig,
                throttle: Throttle | None = None) -> openreview.Client | OpenReviewClient:
    """A guest client (it logs in itself when OPENREVIEW_USERNAME / _PASSWORD are set), paced by
    `throttle` when given."""
    client = openreview.Client(baseurl=baseurl) if api_version == 1 else OpenReviewClient(baseurl=baseurl)
    adapter = TimeoutAdapter(cfg.timeout_seconds, throttle, max_retries=retry_policy(cfg),
                             pool_connections=4, pool_maxsize=max(8, cfg.pdf_workers * 2))
    client.session.mount("http://", adapter)
    client.session.mount("https://", adapter)
    return client


@register_transient
def is_transient(error: BaseException) -> bool:
    """Worth retrying the whole task later: rate limits, server errors, timeouts, dropped connections."""
    if isinstance(error, requests.exceptions.RetryError | requests.ConnectionError | requests.Timeout):
        return True
    if isinstance(error, openreview.OpenReviewException) and error.args and isinstance(error.args[0], dict):
        status = error.args[0].get("status")
        return isinstance(status, int) and (status == 429 or status >= 500)
    return False
