"""A local Anthropic-compatible HTTP server for tests and the offline demo.

It speaks the parts of the API this project uses, to the real `anthropic` SDK pointed at it with
`base_url`: POST /v1/messages, POST /v1/messages/batches, GET /v1/messages/batches/{id} and
GET /v1/messages/batches/{id}/results (JSON Lines). Answers come from a `responder` function
of the request parameters; faults are scripted per route (429 with Retry-After, 529, 500, a
message without a text block, an unparseable body), batches move from in_progress to ended
after a set number of polls, and `batch_fault` can make chosen batch requests error or expire.
Usage mimics the real one (input, output, prompt-cache write and read tokens) and every request
is counted in `counts`.

    with AnthropicServer(responder) as server:
        client = anthropic.Anthropic(base_url=server.url, api_key="...")
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any

from tasks.testing.http import send, send_json
from tasks.testing.local_http import ScriptedAPI
from tasks.testing.local_http import route as serve_route

Responder = Callable[[dict[str, Any]], str]
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error",
               500: "api_error", 529: "overloaded_error"}


def count_tokens(text: str) -> int:
    """A rough, deterministic token count: words and punctuation marks."""
    return len(re.findall(r"\w+|[^\w\s]", text))


def system_text(params: dict[str, Any]) -> str:
    system = params.get("system") or ""
    return system if isinstance(system, str) else "".join(block.get("text", "") for block in system)


def user_text(params: dict[str, Any]) -> str:
    parts = []
    for message in params.get("messages", []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        else:
            parts.extend(block.get("text", "") for block in content or [])
    return "\n".join(parts)


_CRITICAL = re.compile(
    r"\b(however|lacks?|unclear|not|weak|limited|missing|fails?|insufficient|incomplete|concerns?|poor|"
    r"confusing|unconvincing|problems?|issues?|weakness(?:es)?)", re.I)
_SUGGEST = re.compile(r"\b(should|could|suggest|recommend|consider|would benefit)", re.I)


def heuristic_responder(params: dict[str, Any]) -> str:
    """A rule-based stand-in for a real model: one judgment per sentence of the delimited review,
    or, for a synopsis request, the sentences of the paper split into claimed strengths / weaknesses."""
    user = user_text(params)
    match = re.search(r"<(review|paper)>\s*(.*?)\s*</\1>", user, re.S)
    body = match.group(2) if match else user
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", body) if len(s.strip().split()) >= 3]
    if match and match.group(1) == "paper":
        good = [s for s in sentences if not _CRITICAL.search(s)][:5] or sentences[:1]
        bad = [s for s in sentences if _CRITICAL.search(s)][:5]
        return "<claimed_strengths>\n" + "\n".join(good) + "\n</claimed_strengths>\n<claimed_weaknesses>\n" + \
            "\n".join(bad) + "\n</claimed_weaknesses>"
    lines = []
    for sentence in sentences:
        if sentence.startswith("#"):
            continue
        words = sentence.rstrip(".!?").split()[:18]
        phrase = " ".join(words)
        phrase = phrase[0].lower() + phrase[1:] if phrase else phrase
        if sentence.endswith("?"):
            stance = "questions"
        elif _SUGGEST.search(sentence):
            stance = "suggests"
        elif _CRITICAL.search(sentence):
            stance = "criticizes"
        else:
            stance = "appreciates"
        lines.append(f"The reviewer {stance} {'' if stance == 'questions' else 'that '}{phrase}.")
    return "\n".join(lines)


class AnthropicServer(ScriptedAPI):
    """Messages (route `messages`) and Message Batches (`batches_create`, `batches_retrieve`,
    `batches_results`); `received` holds the bodies of messages and batch creates."""

    answer_route = "messages"

    def __init__(self, responder: Responder = heuristic_responder, **scripted: Any) -> None:
        """`scripted`: polls_before_end, batch_fault, echo_key_in_errors, reject_key (ScriptedAPI)."""
        super().__init__(responder, **scripted)

    # ---- HTTP ---------------------------------------------------------------------------------
    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        path = handler.path.split("?")[0].rstrip("/")
        length = int(handler.headers.get("content-length") or 0)
        body = json.loads(handler.rfile.read(length) or b"{}") if length else {}
        bearer = handler.headers.get("authorization", "")
        key = handler.headers.get("x-api-key") or bearer.removeprefix("Bearer ").strip()
        route, batch_id = serve_route(ROUTES, method, path)
        fault = self._arrived(route, body if route in ("messages", "batches_create") else None)
        if route == "unknown":
            return _send_error(handler, 404, f"no route {method} {path}")
        if not key or key == self.reject_key:
            detail = f"invalid api key {key}" if self.echo_key_in_errors else "invalid api key"
            return _send_error(handler, 401, detail)
        if fault is not None and fault.kind == "error":
            return _send_error(handler, fault.status, fault.message, fault.retry_after)
        if route == "messages":
            # API version 2026-10-21 takes no sampling parameters, not even their defaults
            sampling = [name for name in ("temperature", "top_p", "top_k") if name in body]
            if sampling:
                return _send_error(handler, 400, f"{sampling[0]}: Extra inputs are not permitted")
            if fault is not None and fault.kind == "bad_json":
                return send(handler, 200, b'{"id": "msg_broken", "content": [', "application/json")
            message = self._message(body, no_text=fault is not None)
            return send(handler, 200, json.dumps(message).encode(), "application/json")
        if route == "batches_create":
            return send_json(handler, self._create_batch(body))
        batch = self.batches.get(batch_id or "")
        if batch is None:
            return _send_error(handler, 404, f"no batch {batch_id}")
        if route == "batches_retrieve":
            return send_json(handler, self._poll(batch))
        if batch["status"] != "ended":
            return _send_error(handler, 400, "batch has not ended")
        lines = "".join(json.dumps(line) + "\n" for line in batch["results"]).encode()
        return send(handler, 200, lines, "application/x-jsonl")

    # ---- behaviour ----------------------------------------------------------------------------
    def _message(self, params: dict[str, Any], no_text: bool = False) -> dict[str, Any]:
        text = self.responder(params)
        system, user = system_text(params), user_text(params)
        cacheable = any(isinstance(b, dict) and b.get("cache_control") for b in params.get("system") or [])
        usage = {"input_tokens": count_tokens(user), "output_tokens": count_tokens(text),
                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        with self._lock:
            if not cacheable:
                usage["input_tokens"] += count_tokens(system)
            elif system in self._seen_systems:
                usage["cache_read_input_tokens"] = count_tokens(system)
            else:
                self._seen_systems.add(system)
                usage["cache_creation_input_tokens"] = count_tokens(system)
        limit = int(params.get("max_tokens", 1024))
        stop = "end_turn"
        if usage["output_tokens"] > limit:
            stop, usage["output_tokens"] = "max_tokens", limit
        content = [{"type": "tool_use", "id": "toolu_1", "name": "noop", "input": {}}] if no_text else \
            [{"type": "text", "text": text}]
        return {"id": f"msg_{next(self._ids)}", "type": "message", "role": "assistant",
                "model": params.get("model", "unknown"), "content": content, "stop_reason": stop,
                "stop_sequence": None, "usage": usage}

    def _create_batch(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            number = len(self.batches)
            batch_id = f"msgbatch_{number + 1:04d}"
            self.batches[batch_id] = {"id": batch_id, "number": number, "requests": body["requests"],
                                      "polls": 0, "status": "in_progress", "results": [],
                                      "created": datetime.now(UTC)}
            return self._batch_json(self.batches[batch_id])

    def _poll(self, batch: dict[str, Any]) -> dict[str, Any]:
        if self._ends_now(batch):
            results = [self._batch_result(batch["number"], i, r) for i, r in enumerate(batch["requests"])]
            with self._lock:
                batch["results"], batch["status"] = results, "ended"
                batch["ended"] = datetime.now(UTC)
        return self._batch_json(batch)

    def _batch_result(self, number: int, position: int, request: dict[str, Any]) -> dict[str, Any]:
        custom_id = request["custom_id"]
        fault = self.batch_fault(number, position, custom_id) if self.batch_fault else None
        if fault in ("errored", "invalid"):
            kind = "overloaded_error" if fault == "errored" else "invalid_request_error"
            error = {"type": "error", "error": {"type": kind, "message": f"scripted {kind}"}}
            return {"custom_id": custom_id, "result": {"type": "errored", "error": error}}
        if fault in ("expired", "canceled"):
            return {"custom_id": custom_id, "result": {"type": fault}}
        return {"custom_id": custom_id, "result": {"type": "succeeded", "message": self._message(request["params"])}}

    def _batch_json(self, batch: dict[str, Any]) -> dict[str, Any]:
        ended = batch["status"] == "ended"
        kinds = Counter(line["result"]["type"] for line in batch["results"])
        return {
            "id": batch["id"], "type": "message_batch", "processing_status": batch["status"],
            "request_counts": {"processing": 0 if ended else len(batch["requests"]),
                               "succeeded": kinds["succeeded"], "errored": kinds["errored"],
                               "canceled": kinds["canceled"], "expired": kinds["expired"]},
            "created_at": batch["created"].isoformat(),
            "expires_at": (batch["created"] + timedelta(hours=24)).isoformat(),
            "ended_at": batch["ended"].isoformat() if ended else None,
            "results_url": f"{self.url}/v1/messages/batches/{batch['id']}/results" if ended else None,
            "archived_at": None, "cancel_initiated_at": None,
        }


ROUTES = [("POST", r"/v1/messages", "messages"), ("POST", r"/v1/messages/batches", "batches_create"),
          ("GET", r"/v1/messages/batches/([\w-]+)/results", "batches_results"),
          ("GET", r"/v1/messages/batches/([\w-]+)", "batches_retrieve")]


def _send_error(handler: BaseHTTPRequestHandler, status: int, message: str,
                retry_after: float | None = None) -> None:
    kind = ERROR_TYPES.get(status, "api_error")
    send_json(handler, {"type": "error", "error": {"type": kind, "message": message}}, status, retry_after)
