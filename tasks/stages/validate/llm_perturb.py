"""LLM perturbation strategies through any `LanguageModel` (usually the cached one of `make_lm`).

A request that errors, comes back empty, is cut off at max_tokens or (for deletion_completion)
leaves a gap unfilled is a failed perturbation: its text is None and its error says why. The
original review is never used in its place. meaningless_elongation (GEM D.2.2) asks for two one-line
summaries per review instead of a rewrite and builds the text itself (tasks/stages/validate/elongation.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from tasks.lm import ChatRequest, ChatResult, LanguageModel
from tasks.stages.validate.elongation import ASPECTS, elongate, read_summary, summary_requests
from tasks.stages.validate.prompts import GAP_MARKER, PROMPT_VERSION, Prompt, build_prompt
from tasks.stages.validate.strategies import strategy as lookup


@dataclass(frozen=True)
class Perturbation:
    text: str | None
    error: str | None = None
    cached: bool = False


def _custom_id(strategy: str, i: int, prompt: Prompt) -> str:
    digest = hashlib.sha256(f"{prompt.system}\x00{prompt.user}".encode()).hexdigest()[:12]
    return f"{strategy}-{i}-{digest}"[:64]


def _check(strategy: str, result: ChatResult) -> Perturbation:
    if result.error is not None:
        return Perturbation(None, f"llm error: {result.error}", result.cached)
    text = result.text.strip()
    if not text:
        return Perturbation(None, "llm returned no text", result.cached)
    if result.looped:
        return Perturbation(None, "llm answer loops (stopped where it began repeating itself)", result.cached)
    if result.truncated:
        return Perturbation(None, "llm answer cut off at max_tokens", result.cached)
    if strategy == "deletion_completion" and GAP_MARKER in text:
        return Perturbation(None, "gaps left unfilled", result.cached)
    return Perturbation(text, None, result.cached)


def apply_llm_perturbation(
    strategy: str,
    reviews: Sequence[str | None],
    backend: LanguageModel,
    *,
    abstracts: Sequence[str | None] | None = None,
    max_tokens: int | None = None,
    target: str = "review",
) -> list[Perturbation]:
    """Perturb every review with the named LLM strategy; one `Perturbation` per review, in order.

    surface_report needs `abstracts` (one per review). `max_tokens` overrides each prompt's own
    budget. Rows without usable input fail with a reason and are not sent. With `target="judgments"`
    the texts are judgment lines, rewritten by a strategy that rewrites them (`Strategy.rewrites_judgments`).
    """
    if not lookup(strategy).needs_llm:
        raise ValueError(f"{strategy} is deterministic; use tasks.stages.validate.strategies.perturb_texts")
    if abstracts is not None and len(abstracts) != len(reviews):
        raise ValueError("abstracts must have one entry per review")
    if strategy == "meaningless_elongation":
        return _elongate(reviews, backend, max_tokens)
    out: list[Perturbation | None] = [None] * len(reviews)
    requests: list[ChatRequest] = []
    slots: list[int] = []
    for i, review in enumerate(reviews):
        abstract = abstracts[i] if abstracts is not None else None
        if strategy == "surface_report":
            if not abstract or not abstract.strip():
                out[i] = Perturbation(None, "no abstract")
                continue
        elif not review or not review.strip():
            out[i] = Perturbation(None, "empty review" if target == "review" else "no judgments")
            continue
        prompt = build_prompt(strategy, review or "", abstract, target=target)
        tag = strategy if target == "review" else f"{strategy}-judgments"
        requests.append(ChatRequest(prompt.system, prompt.user, max_tokens or prompt.max_tokens,
                                    custom_id=_custom_id(tag, i, prompt)))
        slots.append(i)
    if not requests:
        results: list[ChatResult] = []
    else:  # a caching backend stores only answers that make a usable perturbation
        results = backend.generate(requests, accept=lambda r: _check(strategy, r).error is None)
    if len(results) != len(requests):
        raise RuntimeError(f"backend answered {len(results)} of {len(requests)} requests")
    for i, result in zip(slots, results, strict=True):
        out[i] = _check(strategy, result)
    return [p for p in out if p is not None]


def _elongate(reviews: Sequence[str | None], backend: LanguageModel, max_tokens: int | None) -> list[Perturbation]:
    """GEM D.2.2 on every review: its strength and weakness summaries asked for together, then the text built.
    A review either of whose summaries is unusable fails with the reasons; the cache keeps usable answers only."""
    out: list[Perturbation | None] = [None] * len(reviews)
    requests: list[ChatRequest] = []
    slots: list[int] = []
    for i, review in enumerate(reviews):
        if not review or not review.strip():
            out[i] = Perturbation(None, "empty review")
            continue
        requests += summary_requests(review, i, max_tokens)
        slots.append(i)
    results = backend.generate(requests, accept=lambda r: read_summary(r)[1] is None) if requests else []
    if len(results) != len(requests):
        raise RuntimeError(f"backend answered {len(results)} of {len(requests)} requests")
    width = len(ASPECTS)
    for k, i in enumerate(slots):
        answers = results[k * width:(k + 1) * width]
        read = [read_summary(r) for r in answers]
        cached = all(r.cached for r in answers)
        errors = [f"{aspect} summary: {error}" for aspect, (_, error) in zip(ASPECTS, read, strict=True) if error]
        if errors:
            out[i] = Perturbation(None, "; ".join(errors), cached)
        else:
            strengths, weaknesses = (summary for summary, _ in read)
            out[i] = Perturbation(elongate(reviews[i] or "", strengths or "", weaknesses or ""), None, cached)
    return [p for p in out if p is not None]


__all__ = ["PROMPT_VERSION", "Perturbation", "apply_llm_perturbation"]
