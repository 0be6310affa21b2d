"""Perturbations of a candidate review for the validation workflow (degradations and manipulations).

Deterministic strategies run here without an LLM. Each acts either on the raw review text
(`target="review"`) or, when a file already carries preprocessed judgments, on the judgment lines
(`target="judgments"`):

| strategy               | kind         | review                                   | judgments                     |
| ---------------------- | ------------ | ---------------------------------------- | ----------------------------- |
| sentence_deletion      | degradation  | every other sentence of each section     | every other judgment line     |
| random_replacement     | degradation  | a review of another paper, same group    | that review's judgments       |
| meaningless_elongation | manipulation | fixed filler sentences in every section  | fixed filler judgment lines   |

The LLM strategies are registered here too (`STRATEGIES`); their prompts live in
`tasks/validate/prompts.py`. A perturbation that cannot be made is reported as an error (None
text), never replaced by the original.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import polars as pl

Kind = Literal["degradation", "manipulation"]
Target = Literal["review", "judgments"]


@dataclass(frozen=True)
class Strategy:
    name: str
    kind: Kind
    needs_llm: bool
    description: str


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy("sentence_deletion", "degradation", False, "delete every other sentence, headers kept"),
        Strategy("deletion_completion", "degradation", True,
                 "delete every other sentence, then an LLM fills each gap with a sentence adding nothing"),
        Strategy("random_replacement", "degradation", False, "a review of another paper from the same group"),
        Strategy("surface_report", "degradation", True, "an LLM writes a review from the abstract alone"),
        Strategy("ultra_concise", "degradation", True, "an LLM compresses the review to about 10% of its length"),
        Strategy("opinion_flip", "degradation", True, "an LLM reverses the verdict, structure and topics kept"),
        Strategy("rephrase", "manipulation", True, "an LLM rewrites the review, meaning kept"),
        Strategy("meaningless_elongation", "manipulation", False,
                 "the same content-free sentences added to every section of every review"),
        Strategy("opinion_shift_positive", "manipulation", True, "an LLM makes the stance more favourable"),
        Strategy("opinion_shift_negative", "manipulation", True, "an LLM makes the stance less favourable"),
        Strategy("opinion_shift_hedged", "manipulation", True, "an LLM turns every claim noncommittal"),
        Strategy("opinion_shift_extreme", "manipulation", True, "an LLM pushes every claim to its strongest form"),
    )
}
DETERMINISTIC = tuple(name for name, s in STRATEGIES.items() if not s.needs_llm)


def strategy(name: str) -> Strategy:
    """The registered strategy of this name, or a ValueError listing the known ones."""
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; known: {', '.join(STRATEGIES)}")
    return STRATEGIES[name]


# ---------------------------------------------------------------- sections and sentences

_ABBREVIATIONS = frozenset({
    "e.g", "i.e", "etc", "vs", "cf", "al", "fig", "figs", "eq", "eqs", "sec", "secs", "tab", "ref", "refs",
    "resp", "approx", "no", "dr", "mr", "ms", "prof", "st",
})
_LIST_MARKER = re.compile(r"^\s*(?:[-*+\u2022]|\(?\d{1,3}[.)]|\(?[a-zA-Z][.)]|\([ivx]+\))\s+")
_BOUNDARY = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*(?=\s)")
_CONNECTORS = frozenset({"and", "or", "of", "the", "a", "an", "in", "on", "for", "to", "with", "&", "/"})


def is_header(line: str) -> bool:
    """A section header: a markdown heading, a short line ending in a colon, or a bold-only line.

    Colon lines count when they have at most four words or read like a title (at most ten words,
    every word but connectors capitalized), so "Summary Of The Paper:" and "Minor comments:" are
    headers while "The authors claim the following:" is a sentence.
    """
    text = line.strip()
    if not text:
        return False
    if re.match(r"^#{1,6}\s+\S", text):
        return True
    bare = text.strip("*_ ").strip()
    if not bare:
        return False
    if re.fullmatch(r"(\*\*|__)[^*_]+(\*\*|__):?", text) and len(bare.split()) <= 10:
        return not re.search(r"[.!?]$", bare)
    if not bare.endswith(":"):
        return False
    words = bare[:-1].split()
    if not words or len(words) > 10 or re.search(r"[.!?]\s", bare):
        return False
    if len(words) <= 4:
        return True
    return all(w[:1].isupper() or w.lower().strip(",") in _CONNECTORS for w in words)


def split_sections(text: str) -> list[tuple[str | None, str]]:
    """(header line or None, body) blocks in order; the text before the first header has no header.

    Joining `header + body` of every block gives back `text` exactly (headers keep their newline).
    """
    blocks: list[tuple[str | None, str]] = []
    header: str | None = None
    body: list[str] = []
    for line in text.splitlines(keepends=True):
        if is_header(line):
            if header is not None or body:
                blocks.append((header, "".join(body)))
            header, body = line, []
        else:
            body.append(line)
    if header is not None or body:
        blocks.append((header, "".join(body)))
    return blocks


def split_sentences(body: str) -> list[tuple[str, str]]:
    """(sentence, separator after it) pairs; a sentence ends at . ! ? before a space, or at a line end.

    Abbreviations (e.g., et al., Fig.) and list markers ("1.", "-", "(a)") do not end a sentence.
    Leading whitespace of the body is returned as a first pair with an empty sentence.
    """
    units: list[tuple[str, str]] = []
    lead = re.match(r"\s*", body).group()
    if lead:
        units.append(("", lead))
    for line in re.finditer(r"[^\n]*\n*", body[len(lead):]):
        chunk = line.group()
        if not chunk:
            continue
        content = chunk.rstrip("\n")
        newlines = chunk[len(content):]
        marker = _LIST_MARKER.match(content)
        start = marker.end() if marker else 0
        pos = 0
        for match in _BOUNDARY.finditer(content, start):
            words = content[pos:match.start()].split()
            last = words[-1].lower().lstrip("([{\"'").rstrip(".") if words else ""
            if last in _ABBREVIATIONS or (len(last) == 1 and last.isalpha()):
                continue
            gap = re.match(r"\s*", content[match.end():]).group()
            units.append((content[pos:match.end()], gap))
            pos = match.end() + len(gap)
        rest = content[pos:]
        trailing = rest[len(rest.rstrip()):]
        if rest.strip():
            units.append((rest.rstrip(), trailing + newlines))
        elif units:
            units[-1] = (units[-1][0], units[-1][1] + rest + newlines)
        else:
            units.append(("", rest + newlines))
    return units


def _thin(units: list[tuple[str, str]], gap: str | None) -> str:
    """Keep sentences 1, 3, 5, ... ; a dropped sentence leaves `gap` (if given) or nothing.

    The separator after a dropped sentence replaces the pending one unless it holds fewer line
    breaks, so paragraphs and list lines keep their layout and no stray space is left at the end.
    """
    out: list[str] = []
    pending = ""
    count = 0
    for sentence, sep in units:
        if not sentence:
            pending += sep
            continue
        count += 1
        if count % 2 == 1 or gap is not None:
            out.append(pending)
            out.append(sentence if count % 2 == 1 else gap)
            pending = sep
        elif sep.count("\n") >= pending.count("\n"):
            pending = sep
    out.append(pending)
    return "".join(out)


def sentence_deletion(review: str, gap: str | None = None) -> str:
    """Delete every other sentence (the 2nd, 4th, ...) within each section; headers are kept.

    With `gap`, each deleted sentence is replaced by that marker instead (the first half of
    deletion_completion).
    """
    return "".join((header or "") + _thin(split_sentences(body), gap) for header, body in split_sections(review))


# ---------------------------------------------------------------- meaningless elongation

# Content-free filler, the same for every review; chosen by the words of a section's header and
# worded so that it reads as well at the start of a section as at its end.
FILLER: dict[str, str] = {
    "summary": "This section restates what the submission sets out to do and how it goes about it, "
               "as a basis for the rest of the review.",
    "strengths": "This section weighs what the submission does well against where it could be made "
                 "stronger, in the hope of being useful to the authors.",
    "clarity": "This section considers in turn the presentation, the soundness of the work, how new "
               "it is and whether it could be repeated.",
    "review": "This section gathers the overall view of the submission, taking the whole review into "
              "account, and the recommendation that follows from it.",
    "other": "The comments in this section are given to help the authors improve the submission.",
}
_FILLER_KEYS = (
    ("review", ("summary of the review", "conclusion", "recommendation", "overall", "verdict")),
    ("clarity", ("clarity", "quality", "novelty", "reproducibility", "presentation", "soundness")),
    ("strengths", ("strength", "weakness", "pros", "cons", "limitation", "concern")),
    ("summary", ("summary", "paper", "contribution", "overview")),
)
FILLER_JUDGMENTS: tuple[str, ...] = (
    "The reviewer appreciates that the submission has been put forward for review.",
    "The reviewer suggests that the authors take the remarks of this review into account.",
    "The reviewer questions whether every part of the submission could be explained further.",
)


def filler_for(header: str | None) -> str:
    """The fixed filler sentence(s) for a section with this header."""
    words = (header or "").lower()
    for key, cues in _FILLER_KEYS:
        if any(cue in words for cue in cues):
            return FILLER[key]
    return FILLER["other"]


def meaningless_elongation(review: str, position: Literal["start", "end"] = "start") -> str:
    """Add the same fixed, content-free paragraph to every non-empty section of a review.

    By default the paragraph opens each section (as the GEM paper's elongation does); with
    position="end" it closes it. Whitespace around the section's text is left as it was.
    """
    if position not in ("start", "end"):
        raise ValueError(f"position must be 'start' or 'end', got {position!r}")
    parts: list[str] = []
    for header, body in split_sections(review):
        stripped = body.strip()
        if stripped:
            lead = body[: len(body) - len(body.lstrip())]
            tail = body[len(body.rstrip()):]
            filler = filler_for(header)
            text = f"{filler}\n\n{stripped}" if position == "start" else f"{stripped}\n\n{filler}"
            body = lead + text + tail
        parts.append((header or "") + body)
    return "".join(parts)


# ---------------------------------------------------------------- judgment lines

def split_judgments(judgments: str) -> tuple[list[str], str]:
    """The non-empty judgment lines and the separator they use (a blank line or a newline)."""
    lines = [line.strip() for line in judgments.splitlines() if line.strip()]
    return lines, ("\n\n" if "\n\n" in judgments.strip() else "\n")


def judgment_deletion(judgments: str) -> str:
    """Keep judgment lines 1, 3, 5, ... ."""
    lines, sep = split_judgments(judgments)
    return sep.join(lines[::2])


def judgment_elongation(judgments: str) -> str:
    """Append the same fixed, content-free judgment lines."""
    lines, sep = split_judgments(judgments)
    return sep.join([*lines, *FILLER_JUDGMENTS])


# ---------------------------------------------------------------- random replacement

def random_replacement(
    paper_ids: Sequence[str],
    texts: Sequence[str],
    *,
    seed: int,
    groups: Sequence[str] | None = None,
) -> list[str | None]:
    """For each row, the text of a row of a different paper in the same group, drawn with `seed`.

    The draw depends only on the seed and the rows in their given order. None where the group holds
    no other paper (the caller records it as a failed perturbation).
    """
    if len(paper_ids) != len(texts) or (groups is not None and len(groups) != len(texts)):
        raise ValueError("paper_ids, texts and groups must have the same length")
    group_of = list(groups) if groups is not None else [""] * len(texts)
    rng = np.random.default_rng(seed)
    by_group: dict[str, list[int]] = {}
    for i, g in enumerate(group_of):
        by_group.setdefault(g, []).append(i)
    out: list[str | None] = []
    for pid, g in zip(paper_ids, group_of, strict=True):
        pool = [j for j in by_group[g] if paper_ids[j] != pid]
        out.append(texts[pool[int(rng.integers(len(pool)))]] if pool else None)
    return out


# ---------------------------------------------------------------- applying a strategy to a frame

_SINGLE: dict[tuple[str, Target], Callable[[str], str]] = {
    ("sentence_deletion", "review"): sentence_deletion,
    ("sentence_deletion", "judgments"): judgment_deletion,
    ("meaningless_elongation", "review"): meaningless_elongation,
    ("meaningless_elongation", "judgments"): judgment_elongation,
}


def perturb_texts(
    name: str,
    texts: Sequence[str | None],
    *,
    target: Target = "review",
    paper_ids: Sequence[str] | None = None,
    groups: Sequence[str] | None = None,
    seed: int = 0,
) -> tuple[list[str | None], list[str | None]]:
    """Apply a deterministic strategy to many texts: (perturbed texts, errors), both in input order.

    A row whose text is missing or empty, or that cannot be perturbed, gets None and an error.
    """
    spec = strategy(name)
    if spec.needs_llm:
        raise ValueError(f"{name} needs an LLM; use tasks.stages.validate.llm_perturb")
    if target not in ("review", "judgments"):
        raise ValueError(f"target must be 'review' or 'judgments', got {target!r}")
    usable = [isinstance(t, str) and bool(t.strip()) for t in texts]
    if name == "random_replacement":
        if paper_ids is None:
            raise ValueError("random_replacement needs paper_ids")
        idx = [i for i, ok in enumerate(usable) if ok]
        drawn = random_replacement([paper_ids[i] for i in idx], [texts[i] for i in idx], seed=seed,
                                   groups=None if groups is None else [groups[i] for i in idx])
        result: list[str | None] = [None] * len(texts)
        for i, text in zip(idx, drawn, strict=True):
            result[i] = text
        errors = [None if r is not None else ("empty text" if not ok else "no other paper in the group")
                  for r, ok in zip(result, usable, strict=True)]
        return result, errors
    fn = _SINGLE[(name, target)]
    result = [fn(t) if ok else None for t, ok in zip(texts, usable, strict=True)]
    errors = [None if ok else "empty text" for ok in usable]
    return result, errors


def perturb_frame(
    frame: pl.DataFrame,
    name: str,
    *,
    target: Target = "review",
    group_col: str | None = None,
    seed: int = 0,
) -> pl.DataFrame:
    """`frame` (paper_id and the `target` column) with `strategy`, `perturbed` and `perturb_error` added."""
    needed = {"paper_id", target} | ({group_col} if group_col else set())
    missing = needed - set(frame.columns)
    if missing:
        raise ValueError(f"frame lacks columns {sorted(missing)}")
    texts, errors = perturb_texts(
        name, frame[target].to_list(), target=target, paper_ids=frame["paper_id"].to_list(),
        groups=frame[group_col].cast(pl.String).to_list() if group_col else None, seed=seed,
    )
    return frame.with_columns(
        strategy=pl.lit(name),
        perturbed=pl.Series(texts, dtype=pl.String),
        perturb_error=pl.Series(errors, dtype=pl.String),
    )



# The surface manipulations of tasks/validate/manipulations.py add themselves to STRATEGIES,
# _SINGLE and DETERMINISTIC when that module is imported (it imports the helpers above).
# The adversary (tasks/validate/adversary.py) registers its strategy the same way.
from tasks.stages.validate import adversary as _adversary  # noqa: E402, F401
from tasks.stages.validate import manipulations as _manipulations  # noqa: E402, F401
