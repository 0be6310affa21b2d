"""The exam's questions, drawn from the pipeline's own curated reviews (Auto-PRE's three tests).

Every question shows a paper's synopsis and two reviews and asks which is the more informative
review of this paper; each is asked in both orders (`order` 0 as drawn, 1 swapped).

* consistency: two real reviews of the same paper; the verdict should not follow the order. Two
  kinds of question: which is more informative, and (when preprocessing made judgment lines)
  which supports a statement (a judgment line of one of them);
* pertinence: a real review of the paper with its surface degraded (`plain`: formatting stripped,
  lower case) against a review of another paper of the same venue, polished (by the rewriter LLM,
  else `polish`: a numbered list under markdown headers); the relevant one is `target`;
* self-confidence: an easy set (a real review against another paper's review) and a hard set
  (a real review against its rephrasing by the rewriter LLM, else against another real review of
  the same paper): same format, objectively different difficulty.

Items are drawn with a seed from papers with at least two usable reviews; the other paper comes from
the same group (venue) when there is one. Pure functions: the stage supplies the texts and the rewriter.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import polars as pl

from tasks.metrics.registry import usable

QuestionSet = Literal["consistency", "pertinence", "easy", "hard"]
Ask = Literal["informative", "supports"]
# (prompt version, texts) -> the rewriter's texts in order (None where it gave nothing usable)
Rewrite = Callable[[str, Sequence[str]], list[str | None]]
POLISH_VERSION = "qualify-polish-v1"
REPHRASE_VERSION = "qualify-rephrase-v1"


@dataclass(frozen=True)
class Question:
    set: QuestionSet
    item: int                 # item number within its set; both orders of an item share it
    order: int                # 0: as drawn, 1: swapped
    paper_id: str
    synopsis: str
    first: str                # Review 1 as shown
    second: str               # Review 2 as shown
    target: int | None        # position (1 or 2) of the review the test counts as right; None: consistency
    ask: Ask = "informative"  # which is more informative / which supports `statement`
    statement: str | None = None


def unmarked(text: str) -> str:
    """The text with markdown headers, list markers and emphasis removed, as one paragraph."""
    text = re.sub(r"(?m)^\s*(#+|[-*+]|\d+[.)])\s+", "", text)
    text = re.sub(r"[*_`>#]+", "", text)
    return re.sub(r"\s+", " ", text).strip()


def plain(text: str) -> str:
    """The review with its surface degraded: markdown and list markers stripped, one paragraph, lower case."""
    return unmarked(text).lower()


def polish(text: str) -> str:
    """A deterministic surface polish: the sentences as a numbered list under a markdown header."""
    from tasks.core.review_text import format_bullets, format_headers

    return format_headers(format_bullets(unmarked(text)))


def _both_orders(kind: QuestionSet, item: int, paper: str, synopsis: str, a: str, b: str,
                 target: int | None, statement: str | None = None) -> list[Question]:
    """The item as drawn (a first) and swapped; `target` is the position of `a`'s side when counted."""
    ask: Ask = "informative" if statement is None else "supports"
    return [Question(kind, item, 0, paper, synopsis, a, b, target, ask, statement),
            Question(kind, item, 1, paper, synopsis, b, a, None if target is None else 3 - target, ask, statement)]


def draw_exam(reviews: pl.DataFrame, synopses: Mapping[str, str], groups: Mapping[str, str], n_items: int,
              seed: int, rewrite: Rewrite | None = None) -> list[Question]:
    """The questions of all three tests: up to `n_items` items per set, each in both orders.

    `reviews`: paper_id, review_id, review_text (the curated reviews) and optionally judgments (their
    judgment lines, for the statement questions); `synopses`: paper_id -> the synopsis shown;
    `groups`: paper_id -> its venue (other papers are drawn from the same one)."""
    by_paper: dict[str, list[str]] = {}
    lines: dict[str, list[str]] = {}      # review text -> its judgment lines
    if "judgments" not in reviews.columns:
        reviews = reviews.with_columns(pl.lit(None, pl.String).alias("judgments"))
    for paper, text, judged in reviews.sort("paper_id", "review_id").select("paper_id", "review_text",
                                                                           "judgments").iter_rows():
        if usable(text):
            by_paper.setdefault(paper, []).append(text.strip())
            lines[text.strip()] = [line.strip() for line in (judged or "").splitlines() if line.strip()]
    papers = sorted(p for p, texts in by_paper.items() if len(texts) >= 2)
    if len(papers) < 2:
        raise ValueError(f"the exam needs at least two papers with two usable reviews each; found {len(papers)}")
    rng = random.Random(seed)
    rng.shuffle(papers)
    drawn = []
    for paper in papers[:n_items]:
        a, b = rng.sample(by_paper[paper], 2)
        others = [p for p in papers if p != paper and groups.get(p) == groups.get(paper)] or \
                 [p for p in papers if p != paper]
        other = rng.choice(sorted(others))
        drawn.append((paper, a, b, other))
    polished = rewritten(rewrite, POLISH_VERSION, [_showy(by_paper[o], plain(a)) for _, a, _, o in drawn], polish)
    rephrased = rewritten(rewrite, REPHRASE_VERSION, [a for _, a, _, _ in drawn], None)
    questions: list[Question] = []
    for item, ((paper, a, b, other), fancy, again) in enumerate(zip(drawn, polished, rephrased, strict=True)):
        synopsis = synopses.get(paper) or "Not available."
        questions += _both_orders("consistency", item, paper, synopsis, a, b, None)
        questions += _both_orders("pertinence", item, paper, synopsis, plain(a), fancy, 1)
        questions += _both_orders("easy", item, paper, synopsis, a, rng.choice(by_paper[other]), 1)
        questions += _both_orders("hard", item, paper, synopsis, a, again or b, 1)
        if lines.get(a):           # a statement of one review: which of the two supports it?
            questions += _both_orders("consistency", len(drawn) + item, paper, synopsis, a, b, None,
                                      rng.choice(lines[a]))
    return questions


def _showy(texts: Sequence[str], plain_text: str) -> str:
    """The other paper's review to polish: the shortest one longer than the plain relevant review
    (so the irrelevant side also wins on length), else the longest."""
    longer = sorted((t for t in texts if len(polish(t)) > len(plain_text)), key=len)
    return longer[0] if longer else max(texts, key=len)


def rewritten(rewrite: Rewrite | None, version: str, texts: list[str],
               fallback: Callable[[str], str] | None) -> list[str | None]:
    """The rewriter's versions of `texts`, the deterministic `fallback` where it gave none (or None)."""
    got: list[str | None] = list(rewrite(version, texts)) if rewrite is not None and texts else [None] * len(texts)
    if len(got) != len(texts):
        raise ValueError(f"the rewriter returned {len(got)} texts for {len(texts)}")
    return [g if g else (fallback(t) if fallback else None) for g, t in zip(got, texts, strict=True)]
