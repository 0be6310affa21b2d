"""A local OpenAI-compatible HTTP server for tests and the offline demo.

It speaks the parts of the API this project uses, to the real `openai` client pointed at it with
`base_url=server.url + "/v1"` (`server.base_url`): POST /v1/chat/completions, POST /v1/completions
(with a `completions` handler: tasks/testing/completions.py scores prompts on a local model), POST /v1/files
(multipart upload of a batch's JSON Lines), GET /v1/files/{id}/content, POST /v1/batches and
GET /v1/batches/{id}. Answers come from a `responder` of the request body (the Anthropic server's
`heuristic_responder` reads OpenAI messages too), or, for a chat request with `logprobs = true`, from
`chat_logprobs` (a local model's greedy tokens with their `top_logprobs`: tasks/testing/completions.py
`LocalChatLogprobs`; without it the answer carries `"logprobs": null`, as a server that ignores the
parameter). As OpenAI's API: `top_logprobs` above 20, or without `logprobs`, is a 400; a server built
with `refuse_logprobs` answers any `logprobs` request as OpenAI does for its reasoning models (403 "not
allowed", or 400 `unsupported_parameter`); faults are scripted per route (401 for a refused
key, 429 with Retry-After, 5xx, a completion without content, an unparseable body); batches move
from in_progress to completed after a set number of polls, and `batch_fault` can make chosen
batch items fail (a 500 or 400 line in the error file), expire (a `batch_expired` line; the batch
ends "expired") or go missing (no line at all). Usage mimics
the real one (prompt tokens with `cached_tokens` for a repeated system message) and every request
is counted in `counts`.

    with OpenAIServer(responder) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="...")
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler
from typing import Any

from tasks.testing.anthropic_server import count_tokens, heuristic_responder
from tasks.testing.completions import chat_parts
from tasks.testing.http import send, send_json
from tasks.testing.local_http import ScriptedAPI
from tasks.testing.local_http import route as serve_route

Answer = tuple[str, int, int]   # text, prompt tokens, completion tokens (a model that counts them)
Responder = Callable[[dict[str, Any]], "str | Answer"]
# a batch's items answered together (a model behind the server decodes them in one batch): one answer
# or exception per body, in order
BatchResponder = Callable[[list[dict[str, Any]]], "list[str | Answer | Exception]"]
# 200 answers of /v1/completions a broken server gives (`malformed_next(kind, route="completions")`)
COMPLETIONS_FAULTS = ("html", "bad_json", "nan", "neg_inf", "positive", "extra_value")
MAX_TOP_LOGPROBS = 20
LOGPROBS_REFUSALS = {403: ("You are not allowed to request logprobs from this model", None),
                     400: ("Unsupported parameter: 'logprobs' is not supported with this model.",
                           "unsupported_parameter")}
ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 403: "permission_denied",
               429: "rate_limit_exceeded", 500: "server_error"}


class OpenAIServer(ScriptedAPI):
    """Chat Completions (route `chat`), Completions (`completions`, when `completions` answers),
    Files (`files_create`, `files_content`) and Batches (`batches_create`, `batches_retrieve`);
    `received` holds the bodies of chat completions and of batch items."""

    answer_route = "chat"

    def __init__(self, responder: Responder = heuristic_responder, *, reject_status: int = 401,
                 invalid_batches: str | None = None,
                 completions: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                 chat_logprobs: Callable[[dict[str, Any]], tuple[str, list[dict[str, Any]], int, int]] | None = None,
                 refuse_logprobs: int | None = None, batch_responder: BatchResponder | None = None,
                 **scripted: Any) -> None:
        """`scripted`: polls_before_end, batch_fault, echo_key_in_errors, reject_key (ScriptedAPI);
        `batch_responder`: answers a batch's items together (else `responder`, one by one)."""
        super().__init__(responder, **scripted)
        self.batch_responder = batch_responder
        self.chat_logprobs = chat_logprobs      # answers with logprobs (None: "logprobs": null)
        self.refuse_logprobs = refuse_logprobs  # 403 or 400: the model refuses logprobs
        self.completions = completions          # POST /v1/completions: body -> response (None: 404)
        self.reject_status = reject_status      # the status a `reject_key` request gets (401 / 403)
        self.invalid_batches = invalid_batches  # every batch fails validation with this message
        self.files: dict[str, bytes] = {}

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    # ---- HTTP ---------------------------------------------------------------------------------
    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        path = handler.path.split("?")[0].rstrip("/")
        length = int(handler.headers.get("content-length") or 0)
        raw = handler.rfile.read(length) if length else b""
        key = handler.headers.get("authorization", "").removeprefix("Bearer ").strip()
        route, item = serve_route(ROUTES, method, path)
        fault = self._arrived(route)
        if route == "unknown" or (route == "completions" and self.completions is None):
            return _send_error(handler, 404, f"no route {method} {path}")
        if not key or key == self.reject_key:
            detail = f"Incorrect API key provided: {key}" if self.echo_key_in_errors else "Incorrect API key provided"
            return _send_error(handler, self.reject_status if key else 401, detail)
        if fault is not None and fault.kind == "error":
            return _send_error(handler, fault.status, fault.message, fault.retry_after)
        if route == "chat":
            if fault is not None and fault.kind == "bad_json":
                return send(handler, 200, b'{"id": "chatcmpl-broken", "choices": [', "application/json")
            body = json.loads(raw or b"{}")
            with self._lock:
                self.received.append(body)
            refused = self._logprobs_refused(body)
            if refused is not None:
                return _send_error(handler, *refused)
            try:
                completion = self._completion(body, no_text=fault is not None)
            except Exception as error:  # the responder failed: a 500, as a real server would answer
                return _send_error(handler, 500, f"{type(error).__name__}: {error}")
            return send_json(handler, completion)
        if route == "completions":
            return self._complete_text(handler, raw, fault.kind if fault is not None else None)
        if route == "files_create":
            return send_json(handler, self._store_file(handler.headers.get("content-type", ""), raw))
        if route == "files_content":
            if item not in self.files:
                return _send_error(handler, 404, f"no file {item}")
            return send(handler, 200, self.files[item], "application/octet-stream")
        if route == "batches_create":
            body = json.loads(raw or b"{}")
            if body.get("input_file_id") not in self.files:
                return _send_error(handler, 400, f"no file {body.get('input_file_id')}")
            return send_json(handler, self._create_batch(body))
        batch = self.batches.get(item or "")
        if batch is None:
            return _send_error(handler, 404, f"no batch {item}")
        return send_json(handler, self._poll(batch))

    # ---- behaviour ----------------------------------------------------------------------------
    def _complete_text(self, handler: BaseHTTPRequestHandler, raw: bytes, fault: str | None = None) -> None:
        """POST /v1/completions through the `completions` handler; a refused request gets its status; a
        scripted `fault` (COMPLETIONS_FAULTS) breaks a 200 answer."""
        from tasks.testing.completions import RequestError, broken_logprobs

        if fault == "html":
            return send(handler, 200, b"<html><body><h1>Welcome to nginx!</h1></body></html>", "text/html")
        if fault == "bad_json":
            return send(handler, 200, b'{"id": "cmpl-broken", "choices": [', "application/json")
        try:
            body = json.loads(raw or b"{}")
            with self._lock:
                self.received.append(body)
            answer = self.completions(body)  # type: ignore[misc]
            return send_json(handler, broken_logprobs(answer, fault) if fault else answer)
        except RequestError as error:
            return _send_error(handler, error.status, str(error))
        except Exception as error:  # the model failed: a 500, as a real server would answer
            return _send_error(handler, 500, f"{type(error).__name__}: {error}")

    def _logprobs_refused(self, body: dict[str, Any]) -> tuple[int, str, None, str | None, str] | None:
        """(status, message, retry-after, code, param) of OpenAI's answer to logprobs it will not give, else None."""
        top = body.get("top_logprobs")
        if top is not None and not body.get("logprobs"):
            return 400, "Invalid value for 'top_logprobs': logprobs must be set to true.", None, None, "top_logprobs"
        if top is not None and not 0 <= int(top) <= MAX_TOP_LOGPROBS:
            return (400, f"Invalid 'top_logprobs': integer above maximum value. Expected a value <= "
                         f"{MAX_TOP_LOGPROBS}, but got {top} instead.", None, "integer_above_max_value", "top_logprobs")
        if body.get("logprobs") and self.refuse_logprobs is not None:
            message, code = LOGPROBS_REFUSALS[self.refuse_logprobs]
            return self.refuse_logprobs, message, None, code, "logprobs"
        return None

    def _completion(self, body: dict[str, Any], no_text: bool = False,
                    answered: str | Answer | Exception | None = None) -> dict[str, Any]:
        """The chat completion of `body`; `answered`: the responder's answer, already computed."""
        if isinstance(answered, Exception):
            raise answered
        logprobs = None
        answer: str | Answer
        if answered is not None:
            answer = answered
        elif self._with_logprobs(body):
            text, content, prompt_tokens, completion_tokens = self.chat_logprobs(body)
            answer = (text, prompt_tokens, completion_tokens)
            logprobs = {"content": content, "refusal": None}
        else:
            answer = self.responder(body)
        text, counted = (answer, None) if isinstance(answer, str) else (answer[0], answer[1:])
        messages = body.get("messages", [])
        system = "".join(m.get("content", "") for m in messages if m.get("role") == "system")
        user = "".join(m.get("content", "") for m in messages if m.get("role") != "system")
        with self._lock:   # a repeated system message is served from the (mock) prompt cache
            cached = count_tokens(system) if system in self._seen_systems else 0
            self._seen_systems.add(system)
        prompt, completion = counted or (count_tokens(system) + count_tokens(user), count_tokens(text))
        cached = 0 if counted else cached   # a model behind the server has no prompt cache
        limit = int(body.get("max_completion_tokens") or body.get("max_tokens") or 1024)
        finish = "length" if completion > limit or (counted and completion >= limit) else "stop"
        completion = min(completion, limit)
        message = {"role": "assistant", "content": None if no_text else text, "refusal": None}
        return {"id": f"chatcmpl-{next(self._ids)}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", "unknown"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": logprobs}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                          "total_tokens": prompt + completion,
                          "prompt_tokens_details": {"cached_tokens": cached}}}

    def _store_file(self, content_type: str, raw: bytes) -> dict[str, Any]:
        form = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
        data, name, purpose = b"", "upload", ""
        for part in form.iter_parts():
            field = part.get_param("name", header="content-disposition")
            if field == "file":
                data, name = part.get_payload(decode=True) or b"", part.get_filename() or name
            elif field == "purpose":
                purpose = (part.get_payload(decode=True) or b"").decode()
        return self._new_file(data, name, purpose)

    def _new_file(self, data: bytes, name: str, purpose: str) -> dict[str, Any]:
        with self._lock:
            file_id = f"file-{len(self.files) + 1:04d}"
            self.files[file_id] = data
        return {"id": file_id, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                "filename": name, "purpose": purpose, "status": "processed"}

    def _create_batch(self, body: dict[str, Any]) -> dict[str, Any]:
        lines = [json.loads(line) for line in self.files[body["input_file_id"]].decode().splitlines() if line.strip()]
        with self._lock:
            number = len(self.batches)
            batch_id = f"batch_{number + 1:04d}"
            self.batches[batch_id] = {"id": batch_id, "number": number, "requests": lines, "polls": 0,
                                      "status": "in_progress", "input_file_id": body["input_file_id"],
                                      "endpoint": body.get("endpoint", ""), "created": int(time.time()),
                                      "output_file_id": None, "error_file_id": None, "counts": Counter(),
                                      "errors": None}
            if self.invalid_batches:
                self.batches[batch_id]["status"] = "failed"
                self.batches[batch_id]["errors"] = {"object": "list", "data": [
                    {"code": "invalid_request", "message": self.invalid_batches, "line": 1, "param": None}]}
            return self._batch_json(self.batches[batch_id])

    def _with_logprobs(self, body: dict[str, Any]) -> bool:
        return bool(body.get("logprobs")) and self.chat_logprobs is not None

    def _poll(self, batch: dict[str, Any]) -> dict[str, Any]:
        if self._ends_now(batch):
            done, failed = [], []
            lines = batch["requests"]
            faults = [self.batch_fault(batch["number"], position, line["custom_id"]) if self.batch_fault else None
                      for position, line in enumerate(lines)]
            # the items that reach the model's text answers: no fault stopped them, no logprobs asked
            plain = [fault is None and not self._with_logprobs(line["body"]) for line, fault in zip(lines, faults, strict=True)]
            answered = self._answered_together([line["body"] for line, p in zip(lines, plain, strict=True) if p])
            for position, (line, fault) in enumerate(zip(lines, faults, strict=True)):
                own = next(answered, None) if plain[position] else None
                result = self._batch_item(batch["number"], position, line, fault, own)
                if result is not None:
                    ok = result["response"] is not None and result["response"]["status_code"] == 200
                    (done if ok else failed).append(result)
            with self._lock:
                batch["counts"] = Counter(total=len(batch["requests"]), completed=len(done), failed=len(failed))
            write = lambda rows, name: self._new_file(  # noqa: E731
                "".join(json.dumps(r) + "\n" for r in rows).encode(), name, "batch_output")["id"] if rows else None
            batch["output_file_id"] = write(done, f"{batch['id']}_output.jsonl")
            batch["error_file_id"] = write(failed, f"{batch['id']}_error.jsonl")
            expired = any(r["error"] and r["error"]["code"] == "batch_expired" for r in failed)
            batch["status"] = "expired" if expired else "completed"
        return self._batch_json(batch)

    def _answered_together(self, bodies: list[dict[str, Any]]) -> Iterator[str | Answer | Exception | None]:
        """The batch responder's answers to `bodies`, in order (nothing: each item asks `responder`)."""
        if self.batch_responder is None or not bodies:
            return iter(())
        try:
            answers = self.batch_responder(bodies)
        except Exception as error:  # the whole batch failed: each of its items errors
            answers = [error] * len(bodies)
        return iter(answers)

    def _batch_item(self, number: int, position: int, line: dict[str, Any], fault: str | None,
                    answered: str | Answer | Exception | None = None) -> dict[str, Any] | None:
        custom_id = line["custom_id"]
        if fault == "missing":
            return None
        common = {"id": f"batch_req_{number}_{position}", "custom_id": custom_id, "error": None}
        if fault == "expired":   # as OpenAI reports an item the completion window did not reach
            error = {"code": "batch_expired", "message": "This request could not be executed before the "
                                                         "completion window expired."}
            return {**common, "response": None, "error": error}
        if fault in ("server_error", "invalid"):
            status = 500 if fault == "server_error" else 400
            error = {"message": f"scripted {fault}", "type": ERROR_TYPES[status], "code": fault}
            return {**common, "response": {"status_code": status, "request_id": "req", "body": {"error": error}}}
        with self._lock:
            self.received.append(line["body"])
        try:
            completion = self._completion(line["body"], answered=answered)
        except Exception as error:  # the responder failed: this item errors, as on a real server
            error_body = {"message": f"{type(error).__name__}: {error}", "type": "server_error", "code": "server_error"}
            return {**common, "response": {"status_code": 500, "request_id": "req", "body": {"error": error_body}}}
        return {**common, "response": {"status_code": 200, "request_id": "req", "body": completion}}

    def _batch_json(self, batch: dict[str, Any]) -> dict[str, Any]:
        ended = batch["status"] in ("completed", "expired")
        counts = batch["counts"]
        return {
            "id": batch["id"], "object": "batch", "endpoint": batch["endpoint"], "errors": batch["errors"],
            "input_file_id": batch["input_file_id"], "completion_window": "24h", "status": batch["status"],
            "output_file_id": batch["output_file_id"], "error_file_id": batch["error_file_id"],
            "created_at": batch["created"], "completed_at": int(time.time()) if ended else None,
            "expires_at": batch["created"] + 86400,
            "request_counts": {"total": len(batch["requests"]), "completed": counts["completed"],
                               "failed": counts["failed"]},
        }


ROUTES = [("POST", r"/v1/chat/completions", "chat"), ("POST", r"/v1/completions", "completions"),
          ("POST", r"/v1/files", "files_create"), ("POST", r"/v1/batches", "batches_create"),
          ("GET", r"/v1/files/([\w-]+)/content", "files_content"), ("GET", r"/v1/batches/([\w-]+)", "batches_retrieve")]


def _send_error(handler: BaseHTTPRequestHandler, status: int, message: str, retry_after: float | None = None,
                code: str | None = None, param: str | None = None) -> None:
    kind = "invalid_request_error" if status in (400, 403) and param else \
        ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    send_json(handler, {"error": {"message": message, "type": kind, "param": param, "code": code}}, status, retry_after)


# ---- a local model behind the server (the offline demo's OpenAI-compatible candidate) ----------
def local_model_batch_responder(model: str, quantization: str = "none", keep: bool = False) -> BatchResponder:
    """Answers from a local model (`tasks.lm.local_lm`, greedy), for each item's `max_tokens` tokens,
    a batch's items decoded together (`batch_size` rows at a time, as a vLLM server runs a batch file);
    an item the model refuses (too long) errors alone. A final assistant message with
    `continue_final_message` (the vLLM extension) is continued, and, as vLLM does, only the
    continuation is returned, with the model's own token counts. `quantization`: the weights it decodes
    with (`ModelSpec.quantization`; "int8" on a CPU, as the local candidates of the demo). `keep`: the
    generated sequences' KV stay for the chat logprobs that follow (`keep_finished`; float weights only,
    which the logprobs are read from)."""

    def respond_all(bodies: list[dict[str, Any]]) -> list[str | Answer | Exception]:
        from tasks.lm import ChatRequest, ModelSpec, load_model, local_lm
        from tasks.lm.decode import keep_finished

        if keep and quantization == "none":
            keep_finished(load_model(ModelSpec(name=model))[0])

        parts = [chat_parts(body) for body in bodies]
        requests = [ChatRequest(system, user, int(body.get("max_completion_tokens") or body.get("max_tokens") or 256),
                                prefill=prefill) for body, (system, user, prefill) in zip(bodies, parts, strict=True)]
        with _GENERATING:   # one generation at a time: the model is shared with the rest of the process
            results = local_lm(ModelSpec(name=model, quantization=quantization)).generate(requests)
        return [RuntimeError(r.error) if r.error else (r.text.removeprefix(prefill), r.input_tokens, r.output_tokens)
                for r, (_, _, prefill) in zip(results, parts, strict=True)]

    return respond_all


def local_model_responder(model: str, quantization: str = "none", keep: bool = False) -> Responder:
    """`local_model_batch_responder` for one request (the chat route): its answer, or its error raised."""
    respond_all = local_model_batch_responder(model, quantization, keep)

    def respond(body: dict[str, Any]) -> str | Answer:
        answer = respond_all([body])[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return respond


_GENERATING = threading.Lock()
_SERVED: dict[str, OpenAIServer] = {}


def serve_local_model(model: str) -> str:
    """The base URL of a process-wide OpenAI-compatible server answering with the local `model`
    (chat and, for log-likelihoods, completions; started on first use, stopped with the process).
    `model` may end in "?quantization=int8" (or nf4): the weights chat answers are decoded with; the
    completions' log-likelihoods and the chat logprobs stay on the float model, as a local LM's do."""
    from tasks.lm.backends import served_options
    from tasks.testing.completions import LocalChatLogprobs, LocalCompletions

    name, quantization = served_options(model)
    with _GENERATING:
        if model not in _SERVED:
            _SERVED[model] = OpenAIServer(local_model_responder(name, quantization, keep=True), polls_before_end=0,
                                          batch_responder=local_model_batch_responder(name, quantization, keep=True),
                                          completions=LocalCompletions(name),
                                          chat_logprobs=LocalChatLogprobs(name)).__enter__()
        return _SERVED[model].base_url

