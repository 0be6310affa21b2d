"""What the local API test servers share (anthropic_server.py, openai_server.py): an HTTP server on
127.0.0.1 at a free port, started by `with`, handing every GET and POST to `_handle`; and
`ScriptedAPI`, their record of what arrived and their scripted faults. Three broken servers below any
API: `silent_server` accepts connections and never answers, `dropping_server` closes every
connection as soon as it is accepted, and `trickling_server` answers at once and then sends a byte
at a time, for ever; `body_server` sends a fixed body under any declared length (a cut body, a
huge one)."""

from __future__ import annotations

import itertools
import re
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

BatchFault = Callable[[int, int, str], str | None]   # (batch number, position, custom_id) -> fault


def route(routes: list[tuple[str, str, str]], method: str, path: str) -> tuple[str, str | None]:
    """(route name, the id in the path or None) of the first (method, path pattern, name) that matches."""
    for verb, pattern, name in routes:
        match = re.fullmatch(pattern, path)
        if method == verb and match:
            return name, match.group(1) if match.groups() else None
    return "unknown", None


@dataclass
class Fault:
    status: int = 500                 # HTTP status; 200 with `kind` for malformed successes
    retry_after: float | None = None
    kind: str = "error"               # error | no_text | bad_json | a server's own (COMPLETIONS_FAULTS)
    message: str = "scripted failure"


class LocalHTTPServer:
    _httpd: ThreadingHTTPServer | None = None
    url = ""

    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                server._handle(self, "POST")

            def do_GET(self) -> None:
                server._handle(self, "GET")

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        # a short poll interval: shutdown() waits for it, once per test
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()


class ScriptedAPI(LocalHTTPServer):
    """A local API server that records each request by route (`counts`, `times`, `received`) and
    answers the next requests of a route with scripted faults. `answer_route` is the route of
    single answers (Messages / Chat Completions), which `malformed_next` breaks."""

    answer_route = ""

    def __init__(self, responder: Callable[[dict[str, Any]], Any], *, polls_before_end: int = 1,
                 batch_fault: BatchFault | None = None, echo_key_in_errors: bool = False,
                 reject_key: str | None = None) -> None:
        self.responder = responder
        self.polls_before_end = polls_before_end
        self.batch_fault = batch_fault
        self.echo_key_in_errors = echo_key_in_errors
        self.reject_key = reject_key            # requests with this key are refused
        self.counts: Counter[str] = Counter()
        self.times: dict[str, list[float]] = {}
        self.received: list[dict[str, Any]] = []
        self.batches: dict[str, dict[str, Any]] = {}
        self._faults: dict[str, deque[Fault]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._seen_systems: set[str] = set()   # system prompts seen: a repeated one reads from the cache

    def fail_next(self, status: int, times: int = 1, retry_after: float | None = None, route: str = "") -> None:
        """The next `times` requests to `route` (default: the answer route) get HTTP `status`."""
        self._faults.setdefault(route or self.answer_route, deque()).extend(
            Fault(status, retry_after) for _ in range(times))

    def malformed_next(self, kind: str = "no_text", times: int = 1, route: str = "") -> None:
        """The next `times` answers to `route` (default: the answer route) are 200 but unusable: no text
        (`no_text`), bad JSON (`bad_json`), or a server's own kinds (openai_server.py `COMPLETIONS_FAULTS`)."""
        self._faults.setdefault(route or self.answer_route, deque()).extend(
            Fault(200, kind=kind) for _ in range(times))

    def _arrived(self, route: str, body: dict[str, Any] | None = None) -> Fault | None:
        """Count a request on `route` (keep `body` when given) and pop the fault scripted for it."""
        with self._lock:
            self.counts[route] += 1
            self.times.setdefault(route, []).append(time.monotonic())
            if body is not None:
                self.received.append(body)
            queue = self._faults.get(route)
            return queue.popleft() if queue else None

    def _ends_now(self, batch: dict[str, Any]) -> bool:
        """Count a poll of `batch`; True once, when an in-progress batch has been polled enough to end."""
        with self._lock:
            batch["polls"] += 1
            return batch["status"] == "in_progress" and batch["polls"] > self.polls_before_end


@contextmanager
def silent_server() -> Iterator[str]:
    """The URL ("http://127.0.0.1:<port>") of a socket that accepts connections (the kernel's backlog
    completes each handshake) and never reads or answers a request."""
    with socket.create_server(("127.0.0.1", 0), backlog=64) as listener:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


@contextmanager
def dropping_server() -> Iterator[str]:
    """The URL of a server that accepts every connection and closes it at once, answering nothing."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    listener.settimeout(0.05)
    done = threading.Event()

    def drop() -> None:
        while not done.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            connection.close()

    thread = threading.Thread(target=drop, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        done.set()
        thread.join()
        listener.close()


@contextmanager
def trickling_server(interval: float = 0.3, status: int = 200) -> Iterator[str]:
    """The URL of a server that answers every request at once with `status` and its headers, then
    sends its body one byte every `interval` seconds, for ever: each read is quick, the answer never
    ends. Handles HTTP GET and POST; the bytes are a JSON object's opening, then spaces."""
    done = threading.Event()

    class Trickle(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _trickle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "1000000")
            self.end_headers()
            try:
                self.wfile.write(b"{")
                self.wfile.flush()
                while not done.wait(interval):
                    self.wfile.write(b" ")
                    self.wfile.flush()
            except OSError:
                return

        do_GET = do_POST = _trickle

    with _serving(Trickle, done.set) as url:
        yield url


@contextmanager
def _serving(handler: type[BaseHTTPRequestHandler], stop: Callable[[], None] = lambda: None) -> Iterator[str]:
    """The URL of a threading server on 127.0.0.1 answering with `handler`; `stop` runs before it shuts down."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        stop()
        httpd.shutdown()
        httpd.server_close()


@contextmanager
def body_server(body: bytes, declared: int | None = None, repeat: int = 1) -> Iterator[str]:
    """The URL of a server that answers every GET with `body` sent `repeat` times under a
    Content-Length of `declared` (None: no length, the end of the body is the connection's close),
    then closes: a declared length above what is sent is a cut body."""

    class Body(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200)
            if declared is not None:
                self.send_header("Content-Length", str(declared))
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                for _ in range(repeat):
                    self.wfile.write(body)
            except OSError:
                return
            self.close_connection = True

    with _serving(Body) as url:
        yield url
