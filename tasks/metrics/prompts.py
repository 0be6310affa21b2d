"""The evaluation prompt: the LM acts as a second reviewer whose answer is forced to be y.

The LM sees a synopsis of the paper (or a "not available" line) and the first reviewer's judgments
(the candidate x, or "not available" for the marginal). Its answer, the reference y, is scored by
`tasks.lm.loglikelihood`. The same system prompt serves the conditional and the marginal request, so
log p(y | x) - log p(y) measures only what x tells about y. `PROMPT_VERSION` is part of every
request key: change it whenever a word below changes.
"""

from __future__ import annotations

from typing import Literal

PROMPT_VERSION = "second-reviewer-v1"
NOT_AVAILABLE = "Not available."

TextKind = Literal["judgments", "raw"]

_SYSTEM_JUDGMENTS = (
    "You are the second referee of a paper submitted to a scientific venue. You are shown a synopsis "
    "of the paper and the assessment of a first referee, written as one judgment per line; either of "
    "them may be marked as not available. Give your own assessment of the paper as a list of "
    "judgments, one per line. Each line opens with \"The reviewer appreciates\", \"The reviewer "
    "criticizes\", \"The reviewer questions\" or \"The reviewer suggests\" and states a single point "
    "briefly, without technical specifics of the paper such as method names, numbers or formulas."
)

_SYSTEM_RAW = (
    "You are the second referee of a paper submitted to a scientific venue. You are shown a synopsis "
    "of the paper and the review written by a first referee; either of them may be marked as not "
    "available. Write your own review of the paper."
)

_USER = "### Synopsis of the paper\n{synopsis}\n\n### {label}\n{candidate}"
_LABELS = {"judgments": "Judgments of the first referee", "raw": "Review of the first referee"}


def system_prompt(kind: TextKind) -> str:
    return _SYSTEM_JUDGMENTS if kind == "judgments" else _SYSTEM_RAW


def render_synopsis(abstract: str | None = None, assw: str | None = None) -> str:
    """The synopsis block: the abstract, optionally followed by the author-stated strengths and weaknesses."""
    if abstract is None:
        if assw is not None:
            raise ValueError("an ASSW synopsis needs the abstract too")
        return NOT_AVAILABLE
    text = f"Abstract:\n{abstract.strip()}"
    if assw is not None:
        text += f"\n\nStrengths and weaknesses the authors claim for their own work:\n{assw.strip()}"
    return text


def user_prompt(kind: TextKind, synopsis: str, candidate: str | None) -> str:
    """The user turn; `candidate=None` gives the marginal prompt."""
    body = NOT_AVAILABLE if candidate is None else candidate.strip()
    return _USER.format(synopsis=synopsis, label=_LABELS[kind], candidate=body)
