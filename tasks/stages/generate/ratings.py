"""Every candidate's rating of the paper it reviewed, so rating error and accept accuracy cover every model.

A review that states a rating keeps it (`stated_rating`): the number in its `<rating>` part, else a
line of its text such as "Rating: 6", "**Overall score:** 7/10" or "Recommendation: 3 out of 5",
mapped onto the common scale; its `rating_method` is `stated`. Only a review that states none is
read by a method below, which then names itself in `rating_method`.

A rating is read the way the judges' ratings are (tasks/metrics/rating.py), at the rating position of
the candidate's own answer: right after its `<rating>` tag where the answer has one (a prompt that asks
for the rating), else after the whole review, where a `<rating>` part would come next. Per candidate,
the first method its backend allows:

* `readout:<backend>/<model>`: the backend gives log-likelihoods (a local model, a completions
  server). The rating is the expectation over the common scale of the model's probabilities of each
  scale value at that position (`expected_ratings`): deterministic, a number for every review.
* `toplogprobs:<backend>/<model>`: the backend gives no log-likelihoods but continues an answer it
  is given (a server with `continue_final_message`) and shows its top next tokens (vLLM's OpenAI
  server): the same expectation, from the top 20 tokens after the tag (`top_ratings`: normalised
  over what the list shows; "10" split into "1", "0" read with one more request).
* `asked:<backend>/<model>`: such a server that refuses logprobs: the answer is continued after the
  tag for a few tokens and the number parsed.
* `answer`: a chat API that can do neither; the review stated no rating, so it has none.

A review the method could not rate keeps a null rating and its method; review quality then says
`no_rating`. The rating is on the common scale (`[curate] common_scale`), as the human ratings are.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from tasks.core.config import CandidateConfig
from tasks.lm import ChatRequest, ChatResult, LanguageModel, Unsupported, runs_locally
from tasks.lm.readout import expected_ratings, top_ratings
from tasks.metrics.review_quality.fields import parse_rating, score_parts

RATING_TAG = "<rating>"
ASK_TOKENS = 6     # "8\n</rating>" and a little slack
STATED = "stated"
# a line that states the overall rating: "Rating: 6", "**Overall score:** 7/10", "Recommendation = 3 out of 5"
_STATED_LINE = re.compile(
    r"^[\s>#*_-]*(?:overall\s+|final\s+)?(?:rating|score|recommendation|assessment)[*_\s]*[:=][*_\s]*"
    r"(\d+(?:\.\d+)?)(?:\s*(?:/|out\s+of)\s*(\d+))?", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class Answered:
    """A generated review to rate: its key, the prompt that produced it and the answer's text."""

    key: str
    system: str
    user: str
    text: str


def on_common_scale(value: float, top: float | None, scale: Sequence[float]) -> float | None:
    """A stated `value` (out of `top`, None when no range is given) as a point of the common scale.

    Without a range, or out of the scale's own top, a value on the scale is kept and one between its
    ends goes to the nearest point. Out of another top (a 1..top form), the value is placed
    linearly between the scale's ends first. Ties go to the lower point; a value outside its range
    has no rating (None)."""
    points = sorted(float(v) for v in scale)
    low, high = points[0], points[-1]
    if top is not None and not math.isclose(top, high):
        if top <= 1 or not 0 <= value <= top:
            return None
        value = low + (max(value, 1.0) - 1.0) * (high - low) / (top - 1.0)
    if not low <= value <= high:
        return None
    return min(points, key=lambda p: (abs(p - value), p))


def stated_rating(answer: str, scale: Sequence[float]) -> float | None:
    """The rating a review states, on the common scale: its `<rating>` part's leading number, else
    the last line of the text that states an overall rating; None when it states none."""
    tagged = score_parts(answer).get("rating")
    if tagged is not None:
        value, reason = parse_rating(tagged, scale)
        if reason is None:
            return value
        number = re.match(r"^\s*(\d+(?:\.\d+)?)\s*(?:(?:/|out\s+of)\s*(\d+))?", tagged, re.IGNORECASE)
        if number is not None:
            return on_common_scale(float(number.group(1)), float(number.group(2)) if number.group(2) else None, scale)
    lines = _STATED_LINE.findall(answer or "")
    if not lines:
        return None
    value, top = lines[-1]
    return on_common_scale(float(value), float(top) if top else None, scale)


def rating_position(text: str) -> str:
    """The answer up to its rating: through its `<rating>` tag, or the whole answer and a new one."""
    at = text.find(RATING_TAG)
    if at >= 0:
        return text[: at + len(RATING_TAG)] + "\n"
    return f"{text.rstrip()}\n{RATING_TAG}\n"


def reads_logprobs(backend: LanguageModel) -> bool:
    """Whether the backend answers log-likelihoods (asked with no request: no call is made)."""
    read = getattr(backend, "loglikelihood", None)
    if read is None:
        return False
    try:
        read([])
    except Unsupported:
        return False
    return True


def can_continue(candidate: CandidateConfig) -> bool:
    """Whether the backend continues an answer it is given."""
    return runs_locally(candidate) or candidate.continue_final_message


def rate_answers(answers: Sequence[Answered], backend: LanguageModel, candidate: CandidateConfig,
                 scale: Sequence[float]) -> tuple[dict[str, float | None], dict[str, str], list[ChatResult]]:
    """(key -> rating on the common scale or None, key -> how it was had, the extra calls to count as
    usage). A review that states a rating keeps it (`stated`); the others are read by the first
    method the backend allows (`read_ratings`)."""
    stated = {a.key: stated_rating(a.text, scale) for a in answers}
    unstated = [a for a in answers if stated[a.key] is None]
    read, method, calls = read_ratings(unstated, backend, candidate, scale)
    ratings = {a.key: stated[a.key] if stated[a.key] is not None else read.get(a.key) for a in answers}
    methods = {a.key: STATED if stated[a.key] is not None else method for a in answers}
    return ratings, methods, calls


def read_ratings(answers: Sequence[Answered], backend: LanguageModel, candidate: CandidateConfig,
                 scale: Sequence[float]) -> tuple[dict[str, float | None], str, list[ChatResult]]:
    """(key -> rating on the common scale or None, the method, the extra calls to count as usage: the
    generations asked, or one empty answer per review carrying what its top_logprobs requests cost)
    of reviews that state no rating, read at their rating position."""
    model = f"{backend.name}/{backend.model}"
    if not answers:
        return {}, "none", []
    prompts = [(a.system, a.user) for a in answers]
    positions = [rating_position(a.text) for a in answers]
    if reads_logprobs(backend):
        read = expected_ratings(backend, prompts, positions, _whole(scale), sep="")
        return {a.key: (r.expected if r is not None else None) for a, r in zip(answers, read, strict=True)}, \
            f"readout:{model}", []
    if can_continue(candidate) and getattr(backend, "top_logprobs", None) is not None:
        try:
            calls: list[ChatResult] = []
            top = top_ratings(backend, prompts, positions, _whole(scale), sep="", calls=calls)  # type: ignore[arg-type]
            return {a.key: (r.expected if r is not None else None) for a, r in zip(answers, top, strict=True)}, \
                f"toplogprobs:{model}", calls
        except Unsupported:
            pass
    if can_continue(candidate):
        asked = backend.generate([ChatRequest(a.system, a.user, max_tokens=ASK_TOKENS, custom_id=f"rating:{a.key}"[:64],
                                              prefill=p) for a, p in zip(answers, positions, strict=True)])
        ratings = {}
        for a, p, result in zip(answers, positions, asked, strict=True):
            value = math.nan if result.error else parse_rating(result.text.removeprefix(p), scale)[0]
            ratings[a.key] = None if math.isnan(value) else value
        return ratings, f"asked:{model}", [r for r in asked if r.error is None]
    ratings = {}
    for a in answers:
        value, _ = parse_rating(score_parts(a.text).get("rating"), scale)
        ratings[a.key] = None if math.isnan(value) else value
    return ratings, "answer", []


def _whole(scale: Sequence[float]) -> list[int]:
    """The common scale as whole numbers, the values a readout reads; an error where it is not."""
    whole = [int(v) for v in scale]
    if [float(v) for v in whole] != [float(v) for v in scale]:
        raise ValueError(f"the common scale {list(scale)} is not whole numbers: no rating readout")
    return whole
