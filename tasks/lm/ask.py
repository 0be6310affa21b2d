"""The one loop every stage uses to ask an LLM for structured text: ask, retry once stricter, reject.

Each item is asked once; an answer that failed (an error, or text the caller's parser finds
unusable) is asked once more in the stricter form of its request, a different request and so a
different cache key. Answers are cached whatever they hold (decoding is deterministic), so a
rerun replays both attempts without a model call. What is still unusable after the second
attempt is the caller's to reject, with the reason `failure` gives. Requests that still failed
for a transient reason (rate limit, overload, 5xx) after the backend's own retries raise
`TransientLLMError`, so the Prefect task around the stage retries; nothing is scored or
rejected as if the model had answered.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from tasks.lm.types import ChatRequest, ChatResult, LanguageModel, TransientLLMError

log = logging.getLogger(__name__)
Parsed = TypeVar("Parsed")


@dataclass
class Asked(Generic[Parsed]):
    """Every attempt per key (one or two, in order, each with its parse or None), and every result."""

    attempts: dict[str, list[tuple[ChatResult, Parsed | None]]] = field(default_factory=dict)
    every: list[ChatResult] = field(default_factory=list)

    def last(self, key: str) -> tuple[ChatResult, Parsed | None]:
        return self.attempts[key][-1]

    @property
    def retried(self) -> int:
        return sum(len(tries) > 1 for tries in self.attempts.values())


def ask_with_retry(
    keys: Sequence[str],
    request: Callable[[str, bool], ChatRequest],
    backend: LanguageModel,
    parse: Callable[[str, ChatResult], Parsed],
    usable: Callable[[Parsed], bool],
    chunk_size: int | None = None,
    label: str = "",
) -> Asked[Parsed]:
    """Ask `request(key, strict)` for every key, then once more with strict=True for each whose
    answer was an error or whose `parse(key, answer)` is not `usable`. `chunk_size` sends that many requests
    per backend call (progress is logged per chunk); None sends each round at once. Either way a caching
    backend stores each answer as it arrives (tasks/lm/cache.py), so a killed run keeps what it was sent."""
    asked: Asked[Parsed] = Asked({key: [] for key in keys})
    todo = list(keys)
    for strict in (False, True):
        if not todo:
            break
        size = chunk_size or len(todo)
        for start in range(0, len(todo), size):
            chunk = todo[start : start + size]
            results = backend.generate([request(key, strict) for key in chunk])
            asked.every.extend(results)
            for key, result in zip(chunk, results, strict=True):
                asked.attempts[key].append((result, parse(key, result) if result.ok else None))
            if label:
                log.info("%s: %d/%d answered%s", label, min(start + size, len(todo)), len(todo),
                         " (retry)" if strict else "")
        raise_if_transient(asked.every)
        todo = [key for key in todo if not _ok(asked.last(key), usable)]
    return asked


def raise_if_transient(results: Sequence[ChatResult]) -> None:
    """`TransientLLMError` when a request still failed for a transient reason after the backend's own
    retries: the caller's Prefect task retries it (answers already received are cached), instead of
    scoring or rejecting it as if the model had answered."""
    transient = [r.error for r in results if r.error and r.retryable]
    if transient:
        raise TransientLLMError(f"{len(transient)} LLM requests failed transiently; last: {transient[-1]}")


def _ok(attempt: tuple[ChatResult, Parsed | None], usable: Callable[[Parsed], bool]) -> bool:
    result, parsed = attempt
    return result.ok and parsed is not None and usable(parsed)


def failure(result: ChatResult, unusable: str) -> tuple[str, str]:
    """(rule, detail) of an answer still unusable after the retry; `unusable` says what was expected."""
    if result.error:
        return "llm_error", result.error[:500]
    if not result.text.strip():
        return "empty_answer", "the model answered nothing, twice"
    return "unusable_answer", f"{unusable}, twice; the answer began: {result.text.strip()[:300]!r}"
