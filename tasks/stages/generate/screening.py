"""Submitted reviews screened for text aimed at the LLM evaluators rather than at the authors.

A submitted review is scored by LLM judges and oracles, and short "master key" strings or hidden
instructions can make such evaluators accept an answer. A submission is therefore read for:

- `invisible_characters`: zero-width and joiner characters, bidirectional overrides and Unicode
  tag characters, which a reader does not see but a tokenizer does;
- `hidden_markup`: HTML comments and elements styled not to show (display:none, white or
  transparent text, zero font size), which rendered Markdown hides;
- `evaluator_instruction`: sentences addressed to an evaluator instead of the authors (asking to
  ignore instructions, to give a score, or speaking to "the judge" / "the language model");
- `master_key`: a review that is nothing but a bare verdict word or a lone reasoning opener
  ("Solution", "Let's solve this step by step"), the strings reported to pass LLM judges.

Flagged reviews are kept and scored like any other (a false alarm must not cost a review), and
every flag is recorded with the row, its kind and the matched text (`submission_flags`).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

INVISIBLE = re.compile("[\u200b-\u200f\u2060-\u2064\ufeff\u202a-\u202e\u2066-\u2069\U000e0000-\U000e007f]")
# An element's opening tag, then whether its style hides it. Two steps, each linear in the review's length:
# one pattern for both ("<!--.*?-->|<[a-z]+[^>]*style...") tried every "<" against the whole rest of a
# review without a closing mark, and 60,000 characters of "<a style=\"" took 17 s.
TAG = re.compile(r"<[a-z]+[^>]*>", re.IGNORECASE)   # searched only up to the last ">": every start finds its end
HIDING_STYLE = re.compile(
    r"style\s*=\s*[\"'][^\"']*(?:display\s*:\s*none|visibility\s*:\s*hidden|"
    r"font-size\s*:\s*0|color\s*:\s*(?:white|#fff\b|#ffffff|transparent))[^\"']*[\"']", re.IGNORECASE)
INSTRUCTIONS = re.compile(
    r"\b(?:ignore|disregard|forget)\b[^.\n]{0,40}\b(?:previous|prior|above|earlier|all|your)\b[^.\n]{0,20}"
    r"\b(?:instructions?|guidance|rules|prompt)\b"
    r"|\b(?:as|you are)\s+(?:an?\s+|the\s+)?(?:ai|llm|language model|automated)?\s*(?:judge|evaluator|grader|"
    r"assessor|scorer)\b"
    r"|\b(?:give|assign|award|output|return)\b[^.\n]{0,30}\b(?:score|rating|grade)\b[^.\n]{0,20}\b(?:10|ten|"
    r"maximum|highest|top|perfect)\b"
    r"|\b(?:rate|score|grade)\s+(?:this|the)\s+(?:review|answer|response)\b[^.\n]{0,30}\b(?:10|ten|highest|"
    r"perfect)\b"
    r"|\bnote\s+to\s+(?:the\s+)?(?:ai|llm|language model|evaluator|judge|grader)\b",
    re.IGNORECASE)
MASTER_KEYS = re.compile(
    r"^\W*(?:yes|correct|true|right|accept(?:ed)?|solution|answer|thought process|let'?s solve this "
    r"(?:problem )?step by step|let'?s think step by step)\W*$", re.IGNORECASE)
SHOWN_CHARS = 120


@dataclass(frozen=True)
class Flag:
    kind: str       # invisible_characters | hidden_markup | evaluator_instruction | master_key
    detail: str     # what was found, shown escaped


def screen_review(text: str) -> list[Flag]:
    """The flags of one submitted review (empty when nothing is aimed at an evaluator)."""
    flags = []
    hidden = INVISIBLE.findall(text)
    if hidden:
        names = sorted({unicodedata.name(c, f"U+{ord(c):04X}") for c in hidden})
        flags.append(Flag("invisible_characters", f"{len(hidden)} x {', '.join(names)[:SHOWN_CHARS]}"))
    visible = INVISIBLE.sub("", text)
    for hidden_markup in hidden_markups(visible):
        flags.append(Flag("hidden_markup", _shown(hidden_markup)))
    for match in INSTRUCTIONS.finditer(visible):
        flags.append(Flag("evaluator_instruction", _shown(match.group(0))))
    if MASTER_KEYS.match(visible.strip()):
        flags.append(Flag("master_key", _shown(visible.strip())))
    return flags


def hidden_markups(text: str) -> list[str]:
    """The closed HTML comments and the opening tags styled not to show in `text`, in the order they appear."""
    tags = TAG.finditer(text, 0, text.rfind(">") + 1)
    found = [(m.start(), m.group(0)) for m in tags if HIDING_STYLE.search(m.group(0))]
    at = text.find("<!--")
    while at >= 0:
        end = text.find("-->", at + 4)
        if end < 0:
            break
        found.append((at, text[at:end + 3]))
        at = text.find("<!--", end + 3)
    return [markup for _, markup in sorted(found)]


def _shown(text: str) -> str:
    return " ".join(text.split())[:SHOWN_CHARS].encode("unicode_escape").decode("ascii")
