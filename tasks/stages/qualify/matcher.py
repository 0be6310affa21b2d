"""The point matcher's exam: Beyond Rating's M(a, h) (prompt point-match-v1), examined like the judges.

The matcher answers Yes (the two points make the same point) or No, so each question is a pair
of points, asked as the matcher is asked in the score stage (`match_user`, the same system prompt)
and in both orders (`order` 0 as drawn, 1 swapped). The units are the human reviews' atomic points
of the `points` table when a score run has left one (`unit` "points"), else the sentences of the
curated reviews (`unit` "sentences": markdown stripped, 6 to 60 words):

* consistency: every pair of every set in both orders; the share of distinct pairs with the same
  verdict both times (a binary verdict does not depend on which point is shown first);
* pertinence: a point against a plain-worded restatement of itself (`plain`: its surface
  degraded) must be a match; the same point against a polished point of another paper of the
  same venue (by the rewriter LLM, else `polish_point`) must not; the share answered right;
* self-confidence: an easy set (a point against a point of another paper) and a hard set (a
  point against its rephrasing by the rewriter, else against the closest point by word overlap in
  another review of the same paper): mean confidence on easy minus on hard.

Confidence is the share of the chosen answer in P(Yes) + P(No) at the answer position where the
backend exposes probabilities (the local backend, read by the logit readout), else the stated
level 1-5 read as level / 5. Pure functions, apart from the examinees' calls.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import polars as pl

from tasks.metrics.registry import usable
from tasks.stages.qualify.exam import REPHRASE_VERSION, Rewrite, plain, rewritten, unmarked
from tasks.stages.qualify.examinee import Confidence, Verdict
from tasks.stages.qualify.grade import self_confidence

if TYPE_CHECKING:
    from tasks.metrics.llm_log import LLMLog
    from tasks.metrics.registry import AnswerReadout, ChatLM

MatchSet = Literal["consistency", "pertinence", "easy", "hard"]
Unit = Literal["points", "sentences"]
POLISH_POINT_VERSION = "qualify-polish-point-v1"
ANSWERS = ("Yes", "No")
STATED_FORMAT = ('For this check, reply on one line exactly as "Answer: Yes; Confidence: C" or "Answer: No; '
                 'Confidence: C", where C is how sure you are, from 1 (a guess) to 5 (certain).')
MAX_ANSWER_TOKENS = 16
MIN_WORDS, MAX_WORDS = 6, 60

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\"'])")
_ANSWER = re.compile(r"answer\s*[:=]?\s*(yes|no)\b", re.IGNORECASE)
_LEADING = re.compile(r"^\W*(yes|no)\b", re.IGNORECASE)
_CONFIDENCE = re.compile(r"confidence\s*[:=]?\s*([1-5])\b", re.IGNORECASE)


@dataclass(frozen=True)
class PointQuestion:
    set: MatchSet
    item: int              # item number within its set; both orders of an item share it
    order: int             # 0: as drawn, 1: swapped
    paper_id: str
    a: str                 # point A as shown
    b: str                 # point B as shown
    target: bool | None    # the right verdict (True: a match); None where the test does not count it


def sentences(text: str | None) -> list[str]:
    """The review's sentences with markdown stripped, each of MIN_WORDS..MAX_WORDS words."""
    out = []
    for line in (text or "").splitlines():
        for sentence in _SENTENCE.split(unmarked(line)):
            if MIN_WORDS <= len(sentence.split()) <= MAX_WORDS:
                out.append(sentence.strip())
    return out


def exam_units(reviews: pl.DataFrame, points: pl.DataFrame | None) -> tuple[pl.DataFrame, Unit]:
    """(paper_id, review_id, text) units of the exam and which they are: the human points of the
    curated reviews (strengths and weaknesses) when `points` has some, else the reviews' sentences."""
    schema = {"paper_id": pl.String, "review_id": pl.String, "text": pl.String}
    if points is not None and points.height:
        got = (points.filter((pl.col("source") == "human") & pl.col("field").is_in(["strengths", "weaknesses"])
                             & pl.col("review_id").is_in(reviews["review_id"].to_list()))
               .sort("review_id", "field", "position").select(schema.keys()))
        if got.height:
            return got.cast(schema), "points"   # type: ignore[arg-type]
    rows = [{"paper_id": p, "review_id": r, "text": s}
            for p, r, t in reviews.sort("paper_id", "review_id").select("paper_id", "review_id", "review_text").iter_rows()
            if usable(t) for s in sentences(t)]
    return pl.DataFrame(rows, schema=schema), "sentences"


def polish_point(text: str) -> str:
    """A deterministic surface polish of one point: a bold lead-in and the sentence capitalised."""
    body = unmarked(text)
    body = body[:1].upper() + body[1:]
    return f"**Key point.** {body if body.endswith(('.', '!', '?')) else body + '.'}"


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def closest(point: str, others: Sequence[str]) -> str:
    """The unit of `others` sharing the largest share of words with `point` (Jaccard; the first on a tie)."""
    mine = _words(point)
    return max(others, key=lambda o: len(mine & _words(o)) / max(1, len(mine | _words(o))))


def _both(kind: MatchSet, item: int, paper: str, a: str, b: str, target: bool | None) -> list[PointQuestion]:
    return [PointQuestion(kind, item, 0, paper, a, b, target), PointQuestion(kind, item, 1, paper, b, a, target)]


def draw_match_exam(units: pl.DataFrame, groups: dict[str, str], n_items: int, seed: int,
                    rewrite: Rewrite | None = None) -> list[PointQuestion]:
    """Up to `n_items` items per set, each in both orders, from papers whose units come from at least
    two reviews; the other paper is of the same venue (`groups`) when there is one."""
    by_paper: dict[str, dict[str, list[str]]] = {}
    for paper, review, text in units.select("paper_id", "review_id", "text").iter_rows():
        by_paper.setdefault(paper, {}).setdefault(review, []).append(text.strip())
    papers = sorted(p for p, rs in by_paper.items() if len(rs) >= 2)
    if len(papers) < 2:
        raise ValueError(f"the matcher exam needs two papers with points from two reviews each; found {len(papers)}")
    rng = random.Random(seed)
    rng.shuffle(papers)
    drawn = []
    for paper in papers[:n_items]:
        r1, r2 = rng.sample(sorted(by_paper[paper]), 2)
        a = rng.choice(by_paper[paper][r1])
        others = [p for p in papers if p != paper and groups.get(p) == groups.get(paper)] or \
                 [p for p in papers if p != paper]
        other = rng.choice(sorted(others))
        far = rng.choice([t for texts in by_paper[other].values() for t in texts])
        drawn.append((paper, a, closest(a, by_paper[paper][r2]), far))
    polished = rewritten(rewrite, POLISH_POINT_VERSION, [far for *_, far in drawn], polish_point)
    rephrased = rewritten(rewrite, REPHRASE_VERSION, [a for _, a, _, _ in drawn], None)
    questions: list[PointQuestion] = []
    for item, ((paper, a, near, far), fancy, again) in enumerate(zip(drawn, polished, rephrased, strict=True)):
        questions += _both("consistency", item, paper, a, near, None)
        questions += _both("pertinence", 2 * item, paper, a, plain(a), True)
        questions += _both("pertinence", 2 * item + 1, paper, a, fancy or polish_point(far), False)
        questions += _both("easy", item, paper, a, far, False)
        questions += _both("hard", item, paper, a, again or near, True if again else None)
    return questions


# ---- the statistics --------------------------------------------------------------------------------
def match_consistency(questions: Sequence[PointQuestion], verdicts: Sequence[Verdict]) -> tuple[int, float]:
    """(distinct pairs of any set answered in both orders, share with the same verdict both times); a pair
    asked in two sets (the hard set's fallback is the consistency pair) counts once."""
    items: dict[frozenset[str], dict[int, int]] = {}
    for q, v in zip(questions, verdicts, strict=True):
        if v.choice is not None:
            items.setdefault(frozenset((q.a, q.b)), {})[q.order] = v.choice
    pairs = [(o[0], o[1]) for o in items.values() if 0 in o and 1 in o]
    return len(pairs), (sum(x == y for x, y in pairs) / len(pairs) if pairs else math.nan)


def match_pertinence(questions: Sequence[PointQuestion], verdicts: Sequence[Verdict]) -> tuple[int, float]:
    """(pertinence questions answered, share with the right verdict: match its restatement, not the polished other)."""
    answered = [(q.target, v.choice == 1) for q, v in zip(questions, verdicts, strict=True)
                if q.set == "pertinence" and v.choice is not None]
    return len(answered), (sum(t == c for t, c in answered) / len(answered) if answered else math.nan)


def match_scores(questions: Sequence[PointQuestion], verdicts: Sequence[Verdict]) -> dict[str, tuple[int, float]]:
    return {"consistency": match_consistency(questions, verdicts),
            "pertinence": match_pertinence(questions, verdicts),
            "self_confidence": self_confidence(questions, verdicts)}


# ---- the examinees -----------------------------------------------------------------------------------
def system_turn(confidence: Confidence) -> str:
    """The matcher's own system prompt (point-match-v1); a stated confidence asks for the level too."""
    from tasks.core.prompts import load_prompt
    from tasks.metrics.review_quality.matching import PROMPT_VERSION

    prompt = load_prompt(PROMPT_VERSION).strip()
    return prompt if confidence == "readout" else f"{prompt}\n{STATED_FORMAT}"


def user_turn(q: PointQuestion) -> str:
    from tasks.metrics.review_quality.matching import match_user

    return match_user(q.a, q.b)


def parse_stated_match(text: str) -> Verdict:
    """"Answer: Yes; Confidence: 4" -> Verdict(1, 0.8); "No" alone -> Verdict(0, NaN); else no verdict."""
    text = text or ""
    match = _ANSWER.search(text) or _LEADING.search(text)
    if match is None:
        return Verdict(None, math.nan)
    level = _CONFIDENCE.search(text)
    return Verdict(int(match.group(1).lower() == "yes"), int(level.group(1)) / 5 if level else math.nan)


@dataclass
class ReadoutMatcher:
    """Yes or No as the more probable first answer token; the confidence its share of the two."""

    name: str
    read: AnswerReadout
    confidence: Confidence = "readout"

    def answer(self, questions: Sequence[PointQuestion]) -> list[Verdict]:
        if not questions:
            return []
        probs = self.read([(system_turn("readout"), user_turn(q)) for q in questions], ANSWERS)
        out = []
        for p_yes, p_no in probs:
            total = float(p_yes) + float(p_no)
            out.append(Verdict(int(p_yes >= p_no), max(float(p_yes), float(p_no)) / total) if total > 0
                       else Verdict(None, math.nan))
        return out


@dataclass
class StatedMatcher:
    """A generation backend's Yes or No and its stated confidence."""

    name: str
    llm: ChatLM
    log: LLMLog
    confidence: Confidence = "stated"

    def answer(self, questions: Sequence[PointQuestion]) -> list[Verdict]:
        from tasks.lm.types import ChatRequest
        from tasks.metrics.reviseval import content_key

        if not questions:
            return []
        turns = [(system_turn("stated"), user_turn(q)) for q in questions]
        keys = [content_key(*turn) for turn in turns]
        results = self.llm.generate([ChatRequest(system, user, MAX_ANSWER_TOKENS, custom_id=k)
                                     for k, (system, user) in zip(keys, turns, strict=True)])
        verdicts = [parse_stated_match(r.text) if r.error is None else Verdict(None, math.nan) for r in results]
        self.log.record("qualify:matcher", self.llm.name, self.llm.model, self.llm.cfg, keys, results,
                        [None if v.choice is None else float(v.choice) for v in verdicts])
        return verdicts
