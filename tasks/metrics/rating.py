"""A judge's 0-10 rating, read from its probabilities where it has them, else generated and parsed.

`rate_panel` asks every member of the judging panel (tasks/metrics/panel.py) the same questions
and averages their ratings (weighted by their fusion weights), NaN where no member gave one; it
returns each member's own ratings too (`PanelRatings.members`). Per member:

* readout (a backend whose `loglikelihood` answers: the local models, and any backend the LM layer
  gives log-likelihoods): the rating is the expectation over the scale 0-10 at the answer position
  after "Score:", as G-Eval reads it (`tasks.lm.readout.expected_ratings`): deterministic, and a
  number for every question the model can read at all. A judge that writes an analysis first
  (lm_examiner) generates it, and the rating is read after it.
* toplogprobs (a chat API without log-likelihoods that shows its top next tokens: OpenAI's Chat
  Completions, vLLM): the same expectation, from the top 20 tokens after "Score: "
  (`tasks.lm.readout.top_ratings`: normalised over what the list shows). A model that refuses
  logprobs (OpenAI's reasoning models) falls through to generate.
* generate: the answer is generated (greedy, cached) and the number after "Score:" parsed
  (`parse_rating`); an answer without one leaves the question to the other members.

`[score] judge_method = "generate"` (Resources.judge_method) skips both readouts. Each member's
answers go to the LLM log under the purpose (a readout is logged as its expectation and the
probability mass the scale held). The panel's name, "<method>:<backend>/<model>" joined by "+",
goes into the score rows' `eval_lm`, so the leaderboard says which method produced a column.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tasks.lm.types import ChatRequest, ChatResult, Unsupported
from tasks.metrics.panel import mean_of_members, member_weight, model_key
from tasks.metrics.registry import ChatLM, Resources

if TYPE_CHECKING:
    from tasks.lm.readout import RatingReadout

SCALE = tuple(range(11))
ANALYSIS_END = "</analysis>"

RATING_PREFILL = "Score:"
ANALYSIS_PREFILL = "<analysis>\n"
# "Score: 7" (not the range "Score: 0-10" echoed from the prompt), "7/10" anywhere, or an answer that
# is a number alone; any other number in the text (a heading's "Review 1") is not taken for a rating
_NUM = r"(\d+(?:\.\d+)?)"
_SCORE = re.compile(r"score\s*[:=]?\s*" + _NUM + r"(?!\d|\.\d|\s*[-\u2013]\s*\d)", re.IGNORECASE)
_OUT_OF_TEN = re.compile(r"(?<![\d.])" + _NUM + r"\s*/\s*10\b")
_ALONE = re.compile(r"\s*" + _NUM + r"\s*\.?\s*")


def parse_rating(text: str) -> float:
    """The 0-10 rating of an answer ("Score: 7", "7/10", or a number alone); NaN when there is none in range."""
    text = text or ""
    match = _SCORE.search(text) or _OUT_OF_TEN.search(text) or _ALONE.fullmatch(text)
    if match is None:
        return math.nan
    value = float(match.group(1))
    return value if 0.0 <= value <= 10.0 else math.nan


def _prefix(analysis: str) -> str:
    """The examiner's answer up to the end of its analysis (closed where it ran out), then "Score:"."""
    head, found, _ = analysis.partition(ANALYSIS_END)
    return f"{head.rstrip()}\n{ANALYSIS_END}\n{RATING_PREFILL}" if found else \
        f"{analysis.rstrip()}\n{ANALYSIS_END}\n{RATING_PREFILL}"


def _after_analysis(text: str) -> str:
    return text.partition(ANALYSIS_END)[2] if ANALYSIS_END in text else text


# (prompts, prefill, a list that receives what each prompt's requests cost, where the reader knows) -> readouts
Reader = Callable[[Sequence[tuple[str, str]], str, list[ChatResult]], "list[RatingReadout | None]"]


def _read_all(reader: Reader, prompts: Sequence[tuple[str, str]],
              prefills: Sequence[str]) -> tuple[list[float], list[ChatResult | None]]:
    """Each prompt's expected rating after its prefill (NaN without one) and what its requests cost (None
    where the reader does not say), one reader call per prefill."""
    values = [math.nan] * len(prompts)
    spent: list[ChatResult | None] = [None] * len(prompts)
    by_prefill: dict[str, list[int]] = {}
    for i, prefill in enumerate(prefills):
        if prefill:
            by_prefill.setdefault(prefill, []).append(i)
    for prefill, idx in by_prefill.items():
        calls: list[ChatResult] = []
        for i, got in zip(idx, reader([prompts[i] for i in idx], prefill, calls), strict=True):
            values[i] = got.expected if got is not None else math.nan
        for i, call in zip(idx, calls, strict=False):
            spent[i] = call
    return values, spent


def _with_cost(written: list[ChatResult], spent: list[ChatResult | None], model: str) -> list[ChatResult]:
    """What to log per prompt: its analysis (if written) with the readout's tokens added, else the readout's call."""
    if not written:
        return [s if s is not None else ChatResult("", model=model) for s in spent]
    return [w if s is None else replace(w, input_tokens=w.input_tokens + s.input_tokens,
                                        output_tokens=w.output_tokens + s.output_tokens,
                                        cache_read_tokens=w.cache_read_tokens + s.cache_read_tokens)
            for w, s in zip(written, spent, strict=True)]


def rate_member(llm: ChatLM, method: str, prompts: Sequence[tuple[str, str]], keys: Sequence[str], max_tokens: int,
                analysis: bool) -> tuple[list[float], str, list[ChatResult]]:
    """(ratings, "readout", "toplogprobs" or "generate", what to log) of one judge for the prompts, in
    order: the first method the member's backend allows."""
    from tasks.lm.readout import expected_ratings, top_ratings
    written: list[ChatResult] = []
    prefills = [RATING_PREFILL] * len(prompts)
    if analysis:   # the analysis is written in every method; the rating follows it
        written = llm.generate([ChatRequest(s, u, max_tokens=max_tokens, custom_id=k[:64], prefill=ANALYSIS_PREFILL)
                                for (s, u), k in zip(prompts, keys, strict=True)])
        prefills = [_prefix(r.text) if r.error is None else "" for r in written]
    readers: list[tuple[str, Reader]] = []
    if getattr(llm, "loglikelihood", None) is not None:
        readers.append(("readout", lambda ps, prefill, _: expected_ratings(llm, ps, prefill, SCALE)))  # type: ignore[arg-type]
    if getattr(llm, "top_logprobs", None) is not None:
        readers.append(("toplogprobs", lambda ps, prefill, calls: top_ratings(llm, ps, prefill, SCALE,   # type: ignore[arg-type]
                                                                              calls=calls)))
    for how, reader in (readers if method == "auto" else []):
        try:
            values, spent = _read_all(reader, prompts, prefills)
        except Unsupported:
            continue
        return values, how, written if how == "readout" else _with_cost(written, spent, llm.model)
    if not analysis:
        written = llm.generate([ChatRequest(s, u, max_tokens=max_tokens, custom_id=k[:64], prefill=RATING_PREFILL)
                                for (s, u), k in zip(prompts, keys, strict=True)])
        return [parse_rating(r.text) if r.error is None else math.nan for r in written], "generate", written
    return [parse_rating(_after_analysis(r.text)) if r.error is None else math.nan for r in written], "generate", written


@dataclass(frozen=True)
class PanelRatings:
    """A panel's ratings: its (weighted) mean per question, its name, and each member's own."""

    values: dict[str, float]                            # key -> the panel's rating (NaN: no member gave one)
    name: str                                           # "<method>:<backend>/<model>" of each member, joined by "+"
    members: tuple[tuple[str, dict[str, float]], ...]   # (the member's name, key -> its rating), in panel order


def rate_panel(resources: Resources, questions: Mapping[str, tuple[str, str]], purpose: str, max_tokens: int,
               analysis: bool = False) -> PanelRatings:
    """Every member's rating of each question, and the panel's: their mean weighted by the members'
    fusion weights, NaN where no member gave one."""
    members = resources.panel()
    if not members:
        raise ValueError("no model in the judging role (neither [score] judges nor [score.oracle])")
    keys = sorted(questions)
    prompts = [questions[k] for k in keys]
    per_member: list[list[float]] = []
    names: list[str] = []
    for llm in members:
        method = resources.judge_method
        if not keys:   # nothing to ask: name the method the member would use
            names.append(f"{_method(llm) if method == 'auto' else 'generate'}:{model_key(llm)}")
            continue
        values, how, written = rate_member(llm, method, prompts, keys, max_tokens, analysis)
        names.append(f"{how}:{model_key(llm)}")
        logged = written if how == "generate" else [
            ChatResult(text=f"expected rating {v:.4f}" + (f" after: {w.text}" if w is not None and w.text else ""),
                       model=llm.model, cached=w.cached if w is not None else False,
                       input_tokens=w.input_tokens if w is not None else 0,
                       output_tokens=w.output_tokens if w is not None else 0)
            for v, w in zip(values, written or [None] * len(values), strict=True)]
        resources.log.record(purpose, llm.name, llm.model, llm.cfg, keys, logged,
                             [None if math.isnan(v) else v for v in values])
        per_member.append(values)
    weights = [member_weight(resources, llm) for llm in members]   # Auto-PRE fusion weights (panel.py)
    ratings = {k: mean_of_members([m[i] for m in per_member], weights) for i, k in enumerate(keys)}
    own = [dict(zip(keys, values, strict=True)) for values in per_member] or [{} for _ in names]
    return PanelRatings(ratings, "+".join(names), tuple(zip(names, own, strict=True)))


def _method(llm: ChatLM) -> str:
    """The method a member would rate with under "auto", its backend asked with no request (no call is made)."""
    for how, operation in (("readout", "loglikelihood"), ("toplogprobs", "top_logprobs")):
        read = getattr(llm, operation, None)
        if read is None:
            continue
        try:
            read([])
        except Unsupported:
            continue
        return how
    return "generate"
