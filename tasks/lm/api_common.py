"""What the API backends (anthropic_api.py, openai_api.py) share: how an error reads, which errors
are worth retrying, how long to wait before the next try, how pending requests are cut into batches
under the APIs' size limits, and `ChatAPI`, the generate / batch-resubmit loop both run."""

from __future__ import annotations

import hashlib
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from tasks.lm.types import Accept, ChatRequest, ChatResult, OnAnswers

log = logging.getLogger(__name__)
T = TypeVar("T")


def describe(error: Exception) -> str:
    """One line for an API error: its HTTP status when it has one, its type and message."""
    status = getattr(error, "status_code", None)
    prefix = f"HTTP {status}: " if status else ""
    return f"{prefix}{type(error).__name__}: {error}"


def retryable_api_error(error: Exception, status_error: type[Exception], connection_error: type[Exception],
              retry_statuses: Collection[int]) -> bool:
    """Whether a client library's error is worth retrying: a listed status, any 5xx, or a lost connection."""
    if isinstance(error, status_error):
        status = getattr(error, "status_code", 0)
        return status in retry_statuses or status >= 500
    return isinstance(error, connection_error)


DNS_FAILURES = ("Name or service not known", "nodename nor servname", "Temporary failure in name resolution",
                "No address associated with hostname", "getaddrinfo failed")


def unreachable(error: BaseException) -> str | None:
    """"connection refused" or "name does not resolve" when that is why a request failed, else None
    (a timeout or a dropped connection may pass; a refused or unknown address will not)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError):
            return "connection refused"
        if isinstance(current, socket.gaierror) or any(text in str(current) for text in DNS_FAILURES):
            return "the host name does not resolve"
        if "Connection refused" in str(current):
            return "connection refused"
        current = current.__cause__ or current.__context__
    return None


def deadline_http_client(total: float, default_client: type) -> Any:
    """An httpx client (the API library's `DefaultHttpxClient`) whose every request, its answer read
    in full included, ends within `total` seconds; each read is also bounded by it. The httpx the
    client is built on is the library's own (an API library may ship its own copy under another name)."""
    import importlib

    client_class = next(c for c in default_client.__mro__ if c.__name__ == "Client")
    httpx = importlib.import_module(client_class.__module__.split(".")[0])

    class DeadlineStream(httpx.SyncByteStream):
        """A body that raises `httpx.ReadTimeout` once its request has taken more than `total`
        seconds in all: a server that answers at once and then trickles a byte at a time never trips
        httpx's timeouts, which bound each read, not the whole answer."""

        def __init__(self, stream: httpx.SyncByteStream, deadline: float, request: httpx.Request) -> None:
            self.stream, self.deadline, self.request = stream, deadline, request

        def __iter__(self) -> Iterator[bytes]:
            for chunk in self.stream:
                if time.monotonic() > self.deadline:
                    raise httpx.ReadTimeout(f"no whole answer within {total:g} s (timeout_seconds)",
                                            request=self.request)
                yield chunk

        def close(self) -> None:
            self.stream.close()

    class DeadlineTransport(httpx.HTTPTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            deadline = time.monotonic() + total
            response = super().handle_request(request)
            response.stream = DeadlineStream(response.stream, deadline, request)  # type: ignore[arg-type]
            return response

    return default_client(transport=DeadlineTransport(), timeout=httpx.Timeout(total))


def batch_chunks(indices: list[int], requests: Sequence[ChatRequest], max_requests: int,
                 max_bytes: int) -> Iterator[list[int]]:
    """`indices` in order, cut into batches of at most `max_requests` requests and about `max_bytes`."""
    chunk: list[int] = []
    size = 0
    for i in indices:
        n = len(requests[i].system.encode()) + len(requests[i].user.encode()) + 512
        if chunk and (len(chunk) >= max_requests or size + n > max_bytes):
            yield chunk
            chunk, size = [], 0
        chunk.append(i)
        size += n
    if chunk:
        yield chunk


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds a 429 / 5xx answer asks to wait (`retry-after-ms`, else `retry-after`), or None."""
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            continue
    return None


_SPENT_LOCK = threading.Lock()


def stage_run() -> str:
    """The id of the Prefect flow run (one stage) the caller runs in, "" outside one: what
    `retry_total_seconds` is counted per, also for a backend one process keeps across stages."""
    try:
        from prefect.context import FlowRunContext, TaskRunContext
    except ImportError:          # a GPU box without Prefect: one count per backend
        return ""
    task = TaskRunContext.get()
    if task is not None and task.task_run.flow_run_id is not None:
        return str(task.task_run.flow_run_id)
    flow = FlowRunContext.get()
    return str(flow.flow_run.id) if flow is not None and flow.flow_run is not None else ""


class ChatAPI:
    """The loop an API backend runs around its own calls: requests in parallel (Messages / Chat
    Completions), or in batches resubmitted while some answers failed transiently; waits between
    tries as the server asks, else an exponential back-off. A backend gives `_complete_one`,
    `_run_batch`, `scrub`, `status_error` (its client's error with a response) and the batch limits."""

    name: str
    cfg: Any                      # LLMConfig: max_retries, retry_max_seconds, retry_budget_seconds, use_batches,
                                  # max_in_flight
    sleep: Callable[[float], None]
    backoff_seconds: float
    status_error: type[Exception]
    max_batch_requests: int
    max_batch_bytes: int

    def _hold(self, cfg: Any, identity: str, sleep: Callable[[float], None], backoff_seconds: float,
              batch_store: Any) -> None:
        """What every API backend keeps from its construction: its settings, the model, the identity
        that keys its cached answers, how it waits and where its batches are kept."""
        self.cfg = cfg
        self.model = cfg.model
        self.identity = identity
        self.sleep = sleep
        self.backoff_seconds = backoff_seconds
        self.batch_store = batch_store

    def _batch_id(self, key: str, n: int, submit: Callable[[], str]) -> str:
        """The batch of these requests (`key`): the one an earlier run submitted (kept in `batch_store`),
        else the new one `submit` starts (retrying its own calls), which the store remembers."""
        batch_id = self.batch_store.batch_id(key) if self.batch_store is not None else None
        if batch_id is not None:
            log.info("%s batch %s: %d requests submitted by an earlier run; collecting", self.name, batch_id, n)
            return batch_id
        batch_id = submit()
        if self.batch_store is not None:
            self.batch_store.remember_batch(key, batch_id)
        log.info("%s batch %s: %d requests submitted", self.name, batch_id, n)
        return batch_id

    def _ended(self, retrieve: Callable[[], Any], ended: Callable[[Any], bool]) -> Any:
        """Poll the batch (`retrieve`, retried) every `poll_seconds` until `ended`; its last state."""
        while True:
            batch = self._with_retries(retrieve)
            if ended(batch):
                return batch
            self.sleep(self.cfg.poll_seconds)

    @classmethod
    def from_config(cls, cfg: Any, base_url: str | None = None, batch_store: Any = None) -> ChatAPI:
        """The backend of `cfg` at `base_url` (None: the configured one), its batches kept in `batch_store`
        (tasks/lm/backends.py builds every backend so)."""
        return cls(cfg, base_url=base_url, batch_store=batch_store)  # type: ignore[call-arg]

    def generate(self, requests: Sequence[ChatRequest], accept: Accept | None = None,
                 on_answers: OnAnswers | None = None) -> list[ChatResult]:
        """Answers in request order; each is handed to `on_answers` as it arrives (one by one from the
        parallel calls, a whole batch at once from a batch API). `accept` is for a caching wrapper."""
        if not requests:
            return []
        arrived = on_answers or _ignore
        if self.cfg.use_batches and len(requests) > 1:
            return self._complete_batched(requests, arrived)

        def one(i: int) -> ChatResult:
            result = self._complete_one(requests[i])
            arrived([(i, result)])
            return result
        with ThreadPoolExecutor(max_workers=self.cfg.max_in_flight) as pool:
            return list(pool.map(one, range(len(requests))))

    def scrub(self, text: str) -> str:
        raise NotImplementedError

    def _complete_one(self, request: ChatRequest) -> ChatResult:
        raise NotImplementedError

    def _run_batch(self, indices: list[int], requests: Sequence[ChatRequest],
                   on_answers: OnAnswers) -> dict[int, ChatResult]:
        """One batch of `indices`: submitted (or found in flight under its content key), polled to its end,
        its answers handed to `on_answers`, and only then its id forgotten."""
        raise NotImplementedError

    def _tries(self, call: Callable[[], T], errors: tuple[type[Exception], ...], stopped: Callable[[], None],
               triage: Callable[[Exception, int, float], None]) -> T:
        """`call()` tried up to `max_retries` + 1 times. Before each try `stopped()` raises when an earlier
        failure stopped the backend; an error of the client's `errors` goes to `triage(error, attempt,
        seconds it took)`, which raises what must not be retried; the rest waits (`_wait`) and goes
        again, and the last try's error is re-raised."""
        for attempt in range(self.cfg.max_retries + 1):
            stopped()
            started = time.monotonic()
            try:
                answer = call()
            except errors as error:
                triage(error, attempt, time.monotonic() - started)
                if attempt == self.cfg.max_retries:
                    raise
                self._wait(attempt, error)
            else:
                self._answered()
                return answer
        raise AssertionError("unreachable")

    def _answered(self) -> None:
        """A request was answered: the run of failures (`retry_budget_seconds`) starts again; the
        stage's total (`retry_total_seconds`) does not."""
        self._failing_since: float | None = None

    def _over_budget(self, error: Exception, where: object, failed_for: float = 0.0) -> str | None:
        """On a transient failure that took `failed_for` seconds: None while both bounds hold, else the
        one line that stops the stage. The bounds: the backend has gone on failing (no request answered
        in between) for at most `retry_budget_seconds` (a dead server), and the stage has spent at most
        `retry_total_seconds` on failed requests and their back-off waits in all (a flaky one)."""
        now = time.monotonic()
        since = getattr(self, "_failing_since", None)
        if since is None:
            self._failing_since = since = now
        total = self._spend(failed_for)
        if now - since > self.cfg.retry_budget_seconds:
            return self.scrub(f"{self.name}: {where} answered no request for {now - since:.0f} s of retries "
                              f"(retry_budget_seconds = {self.cfg.retry_budget_seconds:g}); last error: "
                              f"{describe(error)}")
        if total > self.cfg.retry_total_seconds:
            return self.scrub(f"{self.name}: {where} failed requests took {total:.1f} s of this stage in all "
                              f"(retry_total_seconds = {self.cfg.retry_total_seconds:g}); last error: "
                              f"{describe(error)}")
        return None

    def _spend(self, seconds: float) -> float:
        """Add `seconds` to the current stage's time on failed requests (summed over requests in
        flight, so 8 failing together spend it 8 times as fast); the stage's total so far."""
        with _SPENT_LOCK:
            spent = self.__dict__.setdefault("_retry_spent", {})
            key = stage_run()
            spent[key] = spent.get(key, 0.0) + seconds
            return spent[key]

    def _wait(self, attempt: int, error: Exception) -> None:
        """Sleep what Retry-After asks, else an exponential back-off capped at retry_max_seconds; the
        wait counts to the stage's `retry_total_seconds`."""
        asked = retry_after(error.response.headers) if isinstance(error, self.status_error) else None
        wait = asked if asked is not None else min(self.backoff_seconds * 2**attempt, self.cfg.retry_max_seconds)
        log.warning("%s: %s; retrying in %.1f s", self.name, self.scrub(describe(error)), wait)
        self._spend(wait)
        self.sleep(wait)

    def _complete_batched(self, requests: Sequence[ChatRequest], on_answers: OnAnswers) -> list[ChatResult]:
        results: dict[int, ChatResult] = {}
        pending = list(range(len(requests)))
        for round_ in range(self.cfg.max_retries + 1):
            for chunk in batch_chunks(pending, requests, self.max_batch_requests, self.max_batch_bytes):
                results.update(self._run_batch(chunk, requests, on_answers))
            pending = [i for i in pending if results[i].retryable]
            if not pending:
                break
            log.warning("%s batch: %d requests failed transiently; resubmitting", self.name, len(pending))
            if round_ < self.cfg.max_retries:
                self.sleep(min(self.backoff_seconds * 2**round_, self.cfg.retry_max_seconds))
        return [results[i] for i in range(len(requests))]


def _ignore(answers: Sequence[tuple[int, ChatResult]]) -> None:
    """`on_answers` when nobody listens."""


def batch_key(identity: str, bodies: Sequence[object]) -> str:
    """The content key a batch's id is remembered under: the model identity and each request body in
    order. Requests are named by their place in the batch (`custom_ids`), not in the caller's list, so a
    rerun that asks only the answers still missing cuts the same batches and finds them in flight."""
    payload = json.dumps([identity, *bodies], ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def custom_ids(indices: Sequence[int]) -> dict[str, int]:
    """custom_id -> index in the caller's requests: "req-<place in the batch>"."""
    return {f"req-{k}": i for k, i in enumerate(indices)}
