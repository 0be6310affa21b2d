"""What the API backends (anthropic_api.py, openai_api.py) share: how an error reads, which errors
are worth retrying, and how pending requests are cut into batches under the APIs' size limits."""

from __future__ import annotations

import socket
from collections.abc import Collection, Iterator, Sequence

from tasks.lm.types import ChatRequest


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
