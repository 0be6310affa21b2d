"""Cutting a paper's text to a token budget at a section boundary.

The PDF text (tasks/stages/ingest/pdf.py) has one paragraph per line and each heading on its own line: "3
Method", "4.2 Ablations", "B. Proofs", or a bare known title such as "Introduction". A paper that
does not fit is cut just before the last heading that still leaves the kept part within budget.
When even the first section is too long, the cut falls back to the last paragraph (line) break
that fits, then to the last word break; `Fit.cut` says which rule applied. Token counts come from
a `count(text) -> int` function (a tokenizer, or a characters-per-token estimate).
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Counter = Callable[[str], int]

MAX_HEADING_CHARS = 80
_NUMBERED = re.compile(
    r"^(?:\d{1,2}(?:\.\d{1,2})*\.?|[IVX]{1,5}\.|[A-Z](?:\.\d{1,2})*\.?)\s+[A-Z][^\n]*$"
)
_TITLES = re.compile(
    r"^(?:abstract|introduction|background|preliminaries|related\s+work|methods?|methodology|approach|"
    r"experiments?|experimental\s+(?:setup|results)|evaluation|results|analysis|discussion|"
    r"limitations|conclusions?|future\s+work|broader\s+impacts?)\s*:?$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Fit:
    text: str
    truncated: bool
    cut: str          # none | section | paragraph | word
    kept_chars: int
    tokens: int       # count(text)


def is_heading(line: str) -> bool:
    """A short line that reads as a section heading (numbered, or a bare common title)."""
    line = line.strip()
    if not line or len(line) > MAX_HEADING_CHARS or line.endswith((".", ",", ";")):
        return False
    if _TITLES.match(line):
        return True
    return bool(_NUMBERED.match(line)) and len(line.split()) <= 12


def line_starts(text: str) -> list[int]:
    """Offsets where a line begins (after the first)."""
    return [m.end() for m in re.finditer(r"\n+", text) if m.end() < len(text)]


def _line_at(text: str, start: int) -> str:
    end = text.find("\n", start)
    return text[start:] if end < 0 else text[start:end]


def section_starts(text: str) -> list[int]:
    """Offsets where a heading line begins (after the first line)."""
    return [i for i in line_starts(text) if is_heading(_line_at(text, i))]


def word_starts(text: str) -> list[int]:
    return [m.end() for m in re.finditer(r"\s+", text) if m.end() < len(text)]


def _best_prefix(text: str, cuts: Sequence[int], budget: int, count: Counter) -> tuple[int, int] | None:
    """(cut, tokens) of the longest prefix text[:cut] within budget; cuts sorted ascending.
    Counts grow with the prefix, so a binary search over the cuts needs log2(n) counts."""
    lo, hi, best = 0, len(cuts) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        prefix = text[: cuts[mid]].rstrip()
        tokens = count(prefix)
        if prefix and tokens <= budget:
            best, lo = (cuts[mid], tokens), mid + 1
        else:
            hi = mid - 1
    return best


def fit_text(text: str, budget: int, count: Counter) -> Fit | None:
    """`text` itself when it fits `budget` tokens, else its longest prefix ending at a section
    boundary (or paragraph, or word) that fits; None when not even one word fits."""
    tokens = count(text)
    if tokens <= budget:
        return Fit(text, False, "none", len(text), tokens)
    if budget <= 0:
        return None
    for rule, finder in (("section", section_starts), ("paragraph", line_starts), ("word", word_starts)):
        cuts = finder(text)
        if rule == "word":   # only look at words within a generous character window
            cuts = cuts[: bisect.bisect_right(cuts, budget * 16)]
        found = _best_prefix(text, cuts, budget, count)
        if found:
            kept = text[: found[0]].rstrip()
            return Fit(kept, True, rule, len(kept), found[1])
    return None


def estimate_counter(chars_per_token: float) -> Counter:
    """A token count estimated from the length: ceil(chars / chars_per_token)."""
    return lambda text: math.ceil(len(text) / chars_per_token)
