"""The real `openreview-py` clients, configured for bulk, polite, resumable downloads.

The clients' own requests session is kept; its transport is replaced by one that applies our
settings from `[ingest]`: a timeout on every request, and retries with back-off on 429, 5xx,
timeouts and dropped connections. The first back-off is `backoff_seconds` and doubles per attempt
up to `max_backoff_seconds`; a Retry-After header longer than that wait is honoured (capped at
`max_backoff_seconds`). A 429 whose JSON body names the limit's `resetTime` (OpenReview's
`RateLimitError`) waits until then; a reset later than `max_rate_wait_seconds` stops the run at once
with one line saying when to rerun (`RateLimited`). A 429 with an HTML body (the firewall's answer)
is a rate limit too, and 429s past the retries are `RateLimited` as well. Other failures past the
retries surface as `requests.RetryError` / `requests.ConnectionError`. A rerun resumes from the cache.

Every request carries the library's User-Agent (PDF downloads included: the firewall answers other
clients with an HTML 429) and the run's login (tasks/stages/ingest/auth.py); an answer that refuses
the login stops the run with one line (`AuthenticationError`), except a minted token that expired:
that request is sent once more with a token minted again (`renew`), and the run goes on.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime
from typing import Any

import openreview
import requests
from openreview.api import OpenReviewClient
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from tasks.core.config import IngestConfig
from tasks.core.errors import AuthenticationError, TransientError
from tasks.core.retry import register_transient
from tasks.stages.ingest.auth import Login, current_login, refusal, renew, token_now
from tasks.stages.ingest.throttle import Throttle

log = logging.getLogger(__name__)
RETRY_STATUSES = (429, 500, 502, 503, 504)
PLACEHOLDER = "placeholder"   # a token that is not a JWT: the library neither logs in nor looks it up


class RateLimited(TransientError):
    """OpenReview keeps refusing for a rate limit: one line saying when a rerun can go on."""


class Backoff(Retry):
    """urllib3 retry policy: exponential back-off from the first retry, at least Retry-After, and
    a rate limit's reset time (up to `rate_wait_max` seconds) when a 429 names one."""

    rate_wait_max: float = 3900.0
    reset_wait: float = 0.0          # seconds until the limit of the last 429 resets

    def get_backoff_time(self) -> float:
        if not self.history:
            return 0.0
        return float(min(self.backoff_max, self.backoff_factor * 2 ** (len(self.history) - 1)))

    def sleep(self, response: Any = None) -> None:
        retry_after = self.get_retry_after(response) if response is not None else None
        wait = max(retry_after or 0.0, self.get_backoff_time(), self.reset_wait)
        if wait > 0:
            time.sleep(wait)

    def increment(self, method: str | None = None, url: str | None = None, response: Any = None,
                  error: Exception | None = None, *args: Any, **kwargs: Any) -> Retry:
        cause = f"status {response.status}" if response is not None else f"{type(error).__name__}"
        reset = 0.0
        if response is not None and response.status == 429:
            cause, reset = rate_limit(response)
            if reset > self.rate_wait_max:
                until = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(time.time() + reset))
                raise RateLimited(f"OpenReview's rate limit for {(url or '').split('?')[0]} resets at {until}, later "
                                  f"than [ingest] max_rate_wait_seconds = {self.rate_wait_max:g}: rerun after then "
                                  "(the run resumes where it stopped)")
        log.warning("retrying %s %s after %s", method, (url or "").split("?")[0], cause)
        new = super().increment(method, url, response, error, *args, **kwargs)
        new.rate_wait_max = self.rate_wait_max
        new.reset_wait = min(reset, self.rate_wait_max)
        return new


def rate_limit(response: Any) -> tuple[str, float]:
    """(what a 429 says, seconds until its limit resets: 0 when it names no reset time).

    OpenReview answers `{"name": "RateLimitError", "details": {"resetTime": "<ISO time>", ...}}`;
    its firewall answers an HTML page. The body is read here, before urllib3 drains it.
    """
    try:
        body = response.data or b""
    except Exception:  # noqa: BLE001 - a body that cannot be read still is a rate limit
        body = b""
    kind = response.headers.get("Content-Type", "")
    if "html" in kind or body.lstrip()[:1] == b"<":
        return "status 429 (rate limited; an HTML answer from the firewall)", 0.0
    try:
        details = json.loads(body).get("details") or {}
        reset = datetime.fromisoformat(str(details["resetTime"]).replace("Z", "+00:00")).timestamp()
    except (ValueError, KeyError, TypeError, AttributeError):
        return "status 429 (rate limited)", 0.0
    wait = max(0.0, reset - time.time())
    return f"status 429 (rate limited; the limit resets in {wait:.0f} s)", wait


class TimeoutAdapter(HTTPAdapter):
    """An HTTPAdapter that applies a default timeout to requests that set none, the request
    pacing of `throttle` (per endpoint) when given, and stops the run on an answer that refuses
    `login` (tasks/stages/ingest/auth.py)."""

    def __init__(self, timeout: float, throttle: Throttle | None = None, login: Login | None = None,
                 total: float | None = None, **kwargs: Any) -> None:
        self.timeout = timeout
        self.total = total          # seconds one whole answer may take, its body read included
        self.throttle = throttle
        self.login = login or Login()
        super().__init__(**kwargs)

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
        sent = self._authorize(request)
        response = self._send(request, *args, **kwargs)
        if response.status_code == 401 and sent is not None:
            fresh = renew(self.login, sent)      # a minted token expired: log in again, send once more
            if fresh is not None:
                log.info("OpenReview refused the token minted for %s (401): logged in again", self.login.username)
                response.close()
                request.headers["Authorization"] = f"Bearer {fresh}"
                response = self._send(request, *args, **kwargs)
        if response.status_code in (401, 403):
            try:
                body = response.json()
            except ValueError:
                body = None
            line = refusal(response.status_code, body, self.login)
            if line is not None:
                raise AuthenticationError(line)
        return response

    def _authorize(self, request: requests.PreparedRequest) -> str | None:
        """Put the run's current token on a request of a minted login (it may have been renewed since the
        client was made); the token sent, or None for other logins (sent as the client has them)."""
        if self.login.source != "password":
            return None
        token = token_now(self.login)
        if token:
            request.headers["Authorization"] = f"Bearer {token}"
        return token

    def _send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
        if self.throttle is not None:
            self.throttle.before(request.path_url)
        if kwargs.get("timeout") is None:
            kwargs["timeout"] = self.timeout
        streamed, kwargs["stream"] = kwargs.get("stream", False), True
        started = time.monotonic()
        try:
            response = super().send(request, *args, **kwargs)
        except requests.exceptions.RetryError as error:
            if "too many 429" not in str(error):
                raise
            raise RateLimited(f"OpenReview kept answering 429 (rate limited) for {request.path_url.split('?')[0]} "
                              "past the retries: rerun later (the run resumes where it stopped)") from None
        if not streamed and self.total is not None:
            read_within(response, started + self.total, self.total)
        elif not streamed:
            response.content  # noqa: B018 - read now, as requests would
        return response


def read_within(response: requests.Response, deadline: float, total: float) -> None:
    """Read `response`'s whole body, raising `requests.ReadTimeout` once `deadline` (monotonic) has
    passed: a server that trickles a byte at a time never trips the timeout of each read."""
    chunks = []
    try:
        while chunk := response.raw.read1(1 << 16, decode_content=True):   # what has arrived, not a full 64 KiB
            chunks.append(chunk)
            if time.monotonic() > deadline:
                raise requests.exceptions.ReadTimeout(f"{response.url.split('?')[0]}: no whole answer within "
                                                      f"{total:g} s ([ingest] request_total_seconds)")
    except requests.exceptions.ReadTimeout:
        response.close()
        log.warning("%s: the answer took more than %g s in all; retried as a timeout", response.url.split("?")[0],
                    total)
        raise
    except Exception as error:   # urllib3's own read errors, as requests would raise them
        response.close()
        raise requests.exceptions.ConnectionError(str(error)) from None
    response._content = b"".join(chunks)
    response._content_consumed = True


def retry_policy(cfg: IngestConfig) -> Backoff:
    policy = Backoff(
        total=cfg.max_retries, connect=cfg.max_retries, read=cfg.max_retries, status=cfg.max_retries,
        other=0, backoff_factor=cfg.backoff_seconds, backoff_max=cfg.max_backoff_seconds,
        retry_after_max=max(1, int(cfg.max_backoff_seconds)), status_forcelist=RETRY_STATUSES,
        respect_retry_after_header=True, raise_on_status=True, allowed_methods=frozenset({"GET", "HEAD"}),
    )
    policy.rate_wait_max = cfg.max_rate_wait_seconds
    return policy


def make_client(api_version: int, baseurl: str, cfg: IngestConfig, throttle: Throttle | None = None,
                login: Login | None = None) -> openreview.Client | OpenReviewClient:
    """A client with the run's login (`login`, default: `current_login`: OPENREVIEW_TOKEN, else a
    token minted once from OPENREVIEW_USERNAME / _PASSWORD, else a guest), paced by `throttle`."""
    login = login if login is not None else current_login(baseurl, api_version)
    kind = openreview.Client if api_version == 1 else OpenReviewClient
    if login.token:
        # made with a placeholder, then given the token: a token the library can decode would cost a
        # profile request per client, outside our pacing and our handling of refusals
        client = kind(baseurl=baseurl, token=PLACEHOLDER)
        client.token = login.token
        client.headers["Authorization"] = f"Bearer {login.token}"
    else:
        client = _guest(kind, baseurl)
    adapter = TimeoutAdapter(cfg.timeout_seconds, throttle, login, cfg.request_total_seconds,
                             max_retries=retry_policy(cfg),
                             pool_connections=4, pool_maxsize=max(8, cfg.pdf_workers * 2))
    for prefix in [*client.session.adapters]:   # the library mounts its own adapters on some prefixes
        client.session.mount(prefix, adapter)
    client.session.mount("http://", adapter)
    client.session.mount("https://", adapter)
    client.session.headers["User-Agent"] = client.user_agent   # PDF downloads too (the firewall checks it)
    return client


def _guest(kind: type, baseurl: str) -> Any:
    """A client without credentials, even when OPENREVIEW_USERNAME / _PASSWORD are set (the
    library would log in itself; here the run's login decides)."""
    import os

    saved = {name: os.environ.pop(name) for name in ("OPENREVIEW_USERNAME", "OPENREVIEW_PASSWORD")
             if name in os.environ}
    try:
        return kind(baseurl=baseurl)
    finally:
        os.environ.update(saved)


@register_transient
def is_transient(error: BaseException) -> bool:
    """Worth retrying the whole task later: rate limits, server errors, timeouts, dropped connections."""
    if isinstance(error, requests.exceptions.RetryError | requests.ConnectionError | requests.Timeout):
        return True
    if isinstance(error, openreview.OpenReviewException) and error.args and isinstance(error.args[0], dict):
        status = error.args[0].get("status")
        return isinstance(status, int) and (status == 429 or status >= 500)
    return False
