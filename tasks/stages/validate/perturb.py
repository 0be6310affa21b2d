"""Perturbations of a candidate review for the validation workflow (degradations and manipulations).

Deterministic strategies run here without an LLM. Each acts either on the raw review text
(`target="review"`) or, when a file already carries preprocessed judgments, on the judgment lines
(`target="judgments"`):

| strategy                     | kind         | review                                  | judgments                   |
| ---------------------------- | ------------ | --------------------------------------- | --------------------------- |
| sentence_deletion            | degradation  | every other sentence of each section    | every other judgment line   |
| random_replacement           | degradation  | a review of another paper, same group   | that review's judgments     |
| meaningless_elongation_proxy | manipulation | fixed filler sentences in every section | fixed filler judgment lines |

The last is a named proxy of meaningless_elongation (GEM appendix D.2.2), which also embeds an LLM's
summaries of the review's strengths and weaknesses (tasks/stages/validate/elongation.py).
Every strategy, these and the others, is registered in one place: tasks/stages/validate/strategies.py.
A perturbation that cannot be made is reported as an error (None text), never replaced by the original.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from tasks.core.review_text import split_sections, split_sentences

Target = Literal["review", "judgments"]


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


# ---------------------------------------------------------------- meaningless elongation, the proxy

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


def filler_elongation(review: str, position: Literal["start", "end"] = "start") -> str:
    """Add the same fixed, content-free paragraph to every non-empty section of a review (the proxy).

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
