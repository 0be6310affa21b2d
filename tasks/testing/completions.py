"""POST /v1/completions of the local OpenAI-compatible server, on a local model (tests, demo, benches).

It answers the way vLLM's server does for the parameters log-likelihood scoring uses:

* `prompt`: a string, a list of token ids, or a list of either (one choice per prompt, by `index`);
  strings are tokenized without special tokens added (the chat template carries them);
* `echo = true` returns the prompt's tokens in `logprobs` with their log-probabilities, `null` for
  the first token (nothing precedes it), and `top_logprobs` per position: the `logprobs` most likely
  tokens plus the actual one, keyed by their text (vLLM adds the actual token the same way);
* `max_tokens = 0` with `echo` generates nothing (prefill only); a positive `max_tokens` decodes
  greedily and scores the generated tokens too;
* `logprobs` above `max_logprobs` (vLLM's `--max-logprobs`, 20 by default) is a 400, as is a prompt
  longer than the model's context; `echo_logprobs=False` answers `echo` with `logprobs` with the 400
  OpenAI's own models give; `prompt_logprobs=False` drops the prompt's log-probabilities silently,
  as llama.cpp's server does (the client must notice).

`LocalChatLogprobs` answers POST /v1/chat/completions with `logprobs` on the same local model, as
OpenAI's API does: greedy tokens in `choices[0].logprobs.content`, each `{token, logprob, bytes,
top_logprobs}`, the last the `top_logprobs` most likely tokens at that position (the real next-token
distribution, most likely first); a final assistant message with `continue_final_message` (vLLM) is
continued after it.

`FixedCompletions` answers the same shape with no model (every echoed token -1.0), for tests of the
client's checks; `broken_logprobs` breaks an answer the way faulty servers do (NaN, -inf, a positive
value, one value more than the tokens sent).

A completions prompt is one plain forward pass over the whole sequence, nothing shared: the same
computation as `tasks.lm.loglikelihood.reference_score`, so the local engine and this server agree
to floating-point noise. Chat requests decode on a KV cache and keep it for the next request's
shared start, as vLLM's prefix caching does (the same values to floating-point noise). Requests are
served one at a time (the model is shared with the process).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from tasks.lm.local import generation_threads, torch_threads

MAX_LOGPROBS = 20   # vLLM's default --max-logprobs; also OpenAI's cap of Chat Completions' top_logprobs
_SCORING = threading.Lock()


class RequestError(ValueError):
    """A request the server refuses, with the HTTP status it answers."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class LocalCompletions:
    """The completions endpoint on the local `model` (a name `tasks.lm.load_model` knows)."""

    def __init__(self, model: str = "smollm2", max_logprobs: int = MAX_LOGPROBS, echo_logprobs: bool = True,
                 prompt_logprobs: bool = True) -> None:
        self.model_name = model
        self.max_logprobs = max_logprobs
        self.echo_logprobs = echo_logprobs
        self.prompt_logprobs = prompt_logprobs
        self.prompts = 0          # prompts scored
        self.tokens = 0           # tokens passed through the model

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        from tasks.lm import ModelSpec, load_model

        prompts = _prompts(body.get("prompt"))
        echo = bool(body.get("echo"))
        top = body.get("logprobs")
        max_tokens = 16 if body.get("max_tokens") is None else int(body["max_tokens"])
        if top is not None and not 0 <= int(top) <= self.max_logprobs:
            raise RequestError(400, f"logprobs must be between 0 and {self.max_logprobs}, got {top}")
        if echo and top is not None and not self.echo_logprobs:
            raise RequestError(400, "Setting 'echo' and 'logprobs' at the same time is not supported for this model.")
        if max_tokens < 0 or (max_tokens == 0 and not echo):
            raise RequestError(400, "max_tokens must be at least 1 unless echo is set")
        model, tokenizer = load_model(ModelSpec(name=self.model_name))
        context = int(getattr(model.config, "max_position_embeddings", 0) or 0)
        choices, prompt_tokens, completion_tokens = [], 0, 0
        for index, prompt in enumerate(prompts):
            ids = list(prompt) if not isinstance(prompt, str) else tokenizer(prompt, add_special_tokens=False)["input_ids"]
            if not ids:
                raise RequestError(400, "the prompt is empty")
            if context and len(ids) + max_tokens > context:
                raise RequestError(400, f"This model's maximum context length is {context} tokens. However, you "
                                        f"requested {len(ids) + max_tokens} tokens ({len(ids)} in the messages, "
                                        f"{max_tokens} in the completion).")
            with _SCORING, torch_threads(generation_threads()):
                choice = self._choice(model, tokenizer, ids, max_tokens, echo, None if top is None else int(top))
            choices.append({"index": index, **choice})
            prompt_tokens += len(ids)
            completion_tokens += choice.pop("_generated")
        return {"id": f"cmpl-{time.time_ns()}", "object": "text_completion", "created": int(time.time()),
                "model": body.get("model", self.model_name), "choices": choices,
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens}}

    def _choice(self, model: Any, tokenizer: Any, ids: list[int], max_tokens: int, echo: bool,
                top: int | None) -> dict[str, Any]:
        import torch

        with torch.inference_mode():
            generated: list[int] = []
            if max_tokens:
                out = model.generate(torch.tensor([ids], device=model.device), max_new_tokens=max_tokens,
                                     do_sample=False, pad_token_id=tokenizer.pad_token_id)
                generated = out[0, len(ids):].tolist()
            sequence = ids + generated
            logits = model(input_ids=torch.tensor([sequence], device=model.device)).logits[0]
            logprobs = logits.float().log_softmax(dim=-1)
        self.prompts += 1
        self.tokens += len(sequence)
        shown = sequence if echo else generated
        first = 0 if echo else len(ids)
        text = tokenizer.decode(shown)
        finish = "length" if max_tokens and len(generated) == max_tokens else "stop"
        choice: dict[str, Any] = {"text": text, "logprobs": None, "finish_reason": finish, "_generated": len(generated)}
        if top is None:
            return choice
        tokens, values, tops, offsets, offset = [], [], [], [], 0
        for position in range(first, len(sequence)):
            token = sequence[position]
            piece = tokenizer.decode([token])
            tokens.append(piece)
            offsets.append(offset)
            offset += len(piece)
            if position == 0 or (position < len(ids) and not self.prompt_logprobs):
                values.append(None)
                tops.append(None)
                continue
            row = logprobs[position - 1]
            values.append(float(row[token]))
            best = row.topk(top).indices.tolist() if top else []
            tops.append({tokenizer.decode([t]): float(row[t]) for t in [*best, token]})
        if echo and not self.prompt_logprobs:   # llama.cpp: log-probabilities of generated tokens only
            keep = [i for i, v in enumerate(values) if v is not None]
            tokens, values, tops, offsets = ([x[i] for i in keep] for x in (tokens, values, tops, offsets))
        choice["logprobs"] = {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets}
        return choice


def chat_parts(body: dict[str, Any]) -> tuple[str, str, str]:
    """(system, user, prefill) of a chat request: the assistant message it ends with is a prefill only
    with `continue_final_message` (the vLLM extension)."""
    messages = body.get("messages", [])
    system = "".join(m.get("content", "") for m in messages if m.get("role") == "system")
    user = "".join(m.get("content", "") for m in messages if m.get("role") == "user")
    last = messages[-1] if messages else {}
    prefill = last.get("content", "") if body.get("continue_final_message") and last.get("role") == "assistant" else ""
    return system, user, prefill


class LocalChatLogprobs:
    """Chat Completions with `logprobs` on the local `model`: (text, logprobs content, prompt tokens,
    completion tokens) of a request body, decoded greedily on a KV cache, the output head on the last
    position only. Like vLLM's automatic prefix caching, the KV of the last sequence served is kept and
    a request starting with the same tokens computes only what follows them (a rating's second
    request, "Score: 1" after "Score: ", and every question about one paper share their prompt); so
    are the sequences the server's batches generated on the same weights (`keep_finished`,
    tasks/lm/decode.py): a rating read after the review it rates computes only the rating's tokens."""

    def __init__(self, model: str = "smollm2") -> None:
        self.model_name = model
        self.requests = 0
        self.computed = 0          # tokens passed through the model
        self.reused = 0            # prompt tokens read from the prefix cache
        self._kept: tuple[list[int], Any] | None = None   # (tokens, their KV cache)

    def __call__(self, body: dict[str, Any]) -> tuple[str, list[dict[str, Any]], int, int]:
        import torch

        from tasks.lm import ModelSpec, load_model
        from tasks.lm.loading import chat_ids, end_of_turn

        system, user, prefill = chat_parts(body)
        top = int(body.get("top_logprobs") or 0)
        max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
        model, tokenizer = load_model(ModelSpec(name=self.model_name))
        ids = list(chat_ids(tokenizer, system, user, prefill))
        prompt_tokens = len(ids)
        stops = {*end_of_turn(tokenizer), tokenizer.eos_token_id}

        def entry(token: int, value: float) -> dict[str, Any]:
            piece = tokenizer.decode([token])
            return {"token": piece, "logprob": value, "bytes": list(piece.encode("utf-8"))}
        content: list[dict[str, Any]] = []
        with _SCORING, torch_threads(generation_threads()), torch.inference_mode():
            cache, logits = self._prefill(model, ids)
            for _ in range(max_tokens):
                row = logits.float().log_softmax(-1)
                token = int(row.argmax())
                if token in stops:
                    break
                best = row.topk(top).indices.tolist() if top else []
                content.append({**entry(token, float(row[token])),
                                "top_logprobs": [entry(t, float(row[t])) for t in best]})
                ids.append(token)
                logits = self._step(model, [token], cache, len(ids) - 1)
            self._kept = (ids[: cache.get_seq_length()], cache)
        self.requests += 1
        return "".join(c["token"] for c in content), content, prompt_tokens, len(content)

    def _prefill(self, model: Any, ids: list[int]) -> tuple[Any, Any]:
        """(KV cache, next-token logits) after `ids`, reusing the kept cache as far as its tokens agree
        (at least the last token is computed: its logits are the answer's first)."""
        from transformers import DynamicCache

        from tasks.lm.decode import finished_sequences

        reuse = 0
        if self._kept is not None:
            kept, cache = self._kept
            limit = min(len(kept), len(ids) - 1)
            while reuse < limit and kept[reuse] == ids[reuse]:
                reuse += 1
        generated = finished_sequences(model)
        if generated is not None:
            found, kv = generated.longest(ids[:-1])
            if found > reuse:   # a sequence a batch generated: its KV, never written (an update concatenates)
                reuse, cache = found, DynamicCache(kv)
        if reuse:
            extra = cache.get_seq_length() - reuse
            if extra:
                cache.crop(-extra)   # the tokens to drop (negative: the one form every transformers 5 takes)
        else:
            cache = DynamicCache(config=model.config)
        self._kept = None        # cropped or replaced: a failure below leaves nothing stale behind
        self.reused += reuse
        return cache, self._step(model, ids[reuse:], cache, reuse)

    def _step(self, model: Any, tokens: list[int], cache: Any, start: int) -> Any:
        import torch

        self.computed += len(tokens)
        positions = torch.arange(start, start + len(tokens), device=model.device)[None]
        out = model(input_ids=torch.tensor([tokens], device=model.device), position_ids=positions,
                    past_key_values=cache, use_cache=True, logits_to_keep=1)
        return out.logits[0, -1]


def _prompts(prompt: Any) -> list[str | list[int]]:
    """The request's prompts: one string or token list, or a list of them."""
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return [prompt]
    if isinstance(prompt, list) and prompt and all(
            isinstance(p, str) or (isinstance(p, list) and p and all(isinstance(t, int) for t in p)) for p in prompt):
        return prompt
    raise RequestError(400, "prompt must be a string, a list of token ids, or a non-empty list of either")


class FixedCompletions:
    """The echo answer with no model: every prompt token echoed with log-probability `value` (the
    first with `null`); prompts must be token ids. For tests of what the client checks."""

    def __init__(self, value: float = -1.0) -> None:
        self.value = value

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        prompts = _prompts(body.get("prompt"))
        choices = []
        for index, ids in enumerate(prompts):
            if isinstance(ids, str):
                raise RequestError(400, "FixedCompletions scores token ids only")
            values = [None] + [self.value] * (len(ids) - 1)
            choices.append({"index": index, "text": "", "finish_reason": "length", "logprobs": {
                "tokens": [str(t) for t in ids], "token_logprobs": values, "top_logprobs": [None] * len(ids),
                "text_offset": list(range(len(ids)))}})
        count = sum(len(p) for p in prompts)
        return {"id": f"cmpl-{time.time_ns()}", "object": "text_completion", "created": int(time.time()),
                "model": body.get("model", "fixed"), "choices": choices,
                "usage": {"prompt_tokens": count, "completion_tokens": 0, "total_tokens": count}}


def broken_logprobs(answer: dict[str, Any], fault: str) -> dict[str, Any]:
    """`answer` with its first choice's last log-probability NaN (`nan`), -inf (`neg_inf`) or +5.0
    (`positive`), or with one value more than the tokens sent (`extra_value`)."""
    values = answer["choices"][0]["logprobs"]["token_logprobs"]
    if fault == "extra_value":
        values.insert(1, -0.5)
    else:
        values[-1] = {"nan": float("nan"), "neg_inf": float("-inf"), "positive": 5.0}[fault]
    return answer
