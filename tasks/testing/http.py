"""What the local test servers share."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler


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
