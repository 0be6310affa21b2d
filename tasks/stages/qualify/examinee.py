"""The models sitting the exam: a verdict (Review 1 or 2) and a confidence for each question.

* `ReadoutExaminee`: where the backend exposes token probabilities (a local LM, the evaluation
  LM's logit readout): the answer is the more probable of the tokens "1" and "2" at the answer
  position; the confidence is its share of the two, in [0.5, 1] (Auto-PRE reads the
  uncertainty from the answer token's probability the same way).
* `StatedExaminee`: any generation backend (API models expose no probabilities): the model states
  its answer and a confidence level 1 (a guess) .. 5 (certain), read as level / 5.

An answer that cannot be read is a verdict of None: it is left out of the statistics (the exam's
`n` counts what was answered), never guessed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from tasks.core.prompts import load_prompt
from tasks.stages.qualify.exam import Question

if TYPE_CHECKING:
    from tasks.metrics.llm_log import LLMLog
    from tasks.metrics.registry import AnswerReadout, ChatLM

PROMPT_VERSIONS = {"informative": "qualify-compare-v1", "supports": "qualify-supports-v1"}
ANSWERS = ("1", "2")
READOUT_FORMAT = "Reply with the number of the review only: 1 or 2."
STATED_FORMAT = ('Reply on one line exactly as "Answer: N; Confidence: C", where N is 1 or 2 and C is how sure '
                 "you are, from 1 (a guess) to 5 (certain).")
MAX_ANSWER_TOKENS = 16
Confidence = Literal["readout", "stated"]

_ANSWER = re.compile(r"answer\s*[:=]?\s*(?:review\s*)?([12])\b", re.IGNORECASE)
_LEADING = re.compile(r"^\W*(?:review\s*)?([12])\b", re.IGNORECASE)
_CONFIDENCE = re.compile(r"confidence\s*[:=]?\s*([1-5])\b", re.IGNORECASE)


@dataclass(frozen=True)
class Verdict:
    choice: int | None        # 1 or 2; None: no usable answer
    confidence: float         # readout: share of the chosen answer; stated: level / 5; NaN: none


class Examinee(Protocol):
    name: str                 # the model as the qualification table names it
    confidence: Confidence

    def answer(self, questions: Sequence[Question]) -> list[Verdict]: ...


def user_turn(q: Question) -> str:
    ask = ("Which review is the more informative review of this paper?" if q.ask == "informative" else
           f"### Statement\n{q.statement}\n\nWhich review supports this statement more clearly?")
    return (f"### Synopsis of the paper\n{q.synopsis}\n\n### Review 1\n<review>\n{q.first}\n</review>\n\n"
            f"### Review 2\n<review>\n{q.second}\n</review>\n\n{ask}")


def system_turn(confidence: Confidence, ask: str = "informative") -> str:
    return f"{load_prompt(PROMPT_VERSIONS[ask])}\n{READOUT_FORMAT if confidence == 'readout' else STATED_FORMAT}"


def parse_stated(text: str) -> Verdict:
    """"Answer: 2; Confidence: 4" -> Verdict(2, 0.8); the answer alone gives a NaN confidence."""
    text = text or ""
    match = _ANSWER.search(text) or _LEADING.search(text)
    level = _CONFIDENCE.search(text)
    if match is None:
        return Verdict(None, math.nan)
    return Verdict(int(match.group(1)), int(level.group(1)) / 5 if level else math.nan)


def from_probabilities(p1: float, p2: float) -> Verdict:
    total = p1 + p2
    if not total > 0:
        return Verdict(None, math.nan)
    return Verdict(1 if p1 >= p2 else 2, max(p1, p2) / total)


@dataclass
class ReadoutExaminee:
    name: str
    read: AnswerReadout
    confidence: Confidence = "readout"

    def answer(self, questions: Sequence[Question]) -> list[Verdict]:
        if not questions:
            return []
        probs = self.read([(system_turn("readout", q.ask), user_turn(q)) for q in questions], ANSWERS)
        return [from_probabilities(float(p1), float(p2)) for p1, p2 in probs]


@dataclass
class StatedExaminee:
    name: str
    llm: ChatLM
    log: LLMLog
    confidence: Confidence = "stated"

    def answer(self, questions: Sequence[Question]) -> list[Verdict]:
        from tasks.lm.types import ChatRequest
        from tasks.metrics.reviseval import content_key

        if not questions:
            return []
        turns = [(system_turn("stated", q.ask), user_turn(q)) for q in questions]
        keys = [content_key(*turn) for turn in turns]
        results = self.llm.generate([ChatRequest(system, user, MAX_ANSWER_TOKENS, custom_id=k)
                                     for k, (system, user) in zip(keys, turns, strict=True)])
        verdicts = [parse_stated(r.text) if r.error is None else Verdict(None, math.nan) for r in results]
        self.log.record("qualify:exam", self.llm.name, self.llm.model, self.llm.cfg, keys, results,
                        [None if v.choice is None else float(v.choice) for v in verdicts])
        return verdicts
