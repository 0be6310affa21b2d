"""Every candidate's rating of the paper it reviewed, so rating error and accept accuracy cover every model.

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
* `answer`: the rating the answer itself wrote in its `<rating>` part (a chat API that can do neither).

A review the method could not rate keeps a null rating and its method; review quality then says
`no_rating`. The rating is on the common scale (`[curate] common_scale`), as the human ratings are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tasks.core.config import CandidateConfig
from tasks.lm import ChatRequest, ChatResult, LanguageModel, Unsupported, runs_locally
from tasks.lm.readout import expected_ratings, top_ratings
from tasks.metrics.review_quality.fields import parse_rating, score_parts

RATING_TAG = "<rating>"
ASK_TOKENS = 6     # "8\n</rating>" and a little slack


@dataclass(frozen=True)
class Answered:
    """A generated review to rate: its key, the prompt that produced it and the answer's text."""

    key: str
    system: str
    user: str
    text: str


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
                 scale: Sequence[float]) -> tuple[dict[str, float | None], str, list[ChatResult]]:
    """(key -> rating on the common scale or None, the method, the extra calls to count as usage: the
    generations asked, or one empty answer per review carrying what its top_logprobs requests cost)."""
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
