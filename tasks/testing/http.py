"""What the local test servers share."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


def send(handler: BaseHTTPRequestHandler, status: int, body: bytes, content_type: str,
         headers: dict[str, str] | None = None) -> None:
    """One whole response: status, content type and length, extra headers, body."""
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(body)


def send_json(handler: BaseHTTPRequestHandler, data: Any, status: int = 200, retry_after: float | None = None) -> None:
    """`data` as a JSON response; a `retry-after` header (seconds) when given."""
    headers = {"retry-after": f"{retry_after:g}"} if retry_after is not None else {}
    send(handler, status, json.dumps(data).encode(), "application/json", headers)
