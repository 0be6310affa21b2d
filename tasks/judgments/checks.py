"""Checks and repairs on what the preprocessing LLM answers: pure functions, no model calls.

Judgments: every kept line reads "The reviewer <stance> ...". Unambiguous slips are repaired:
bullets, numbering, markdown emphasis, wrapping quotes, extra whitespace, a missing "The", a
lowercase start, another tense or spelling of the verb, several sentences on one line (each must
then be a judgment of its own), a missing final full stop. A sentence without a recognisable
stance is dropped and reported, never given a guessed stance; so are empty judgments, exact
repeats and a last line cut off by the token limit.

ASSW synopses: the answer must hold claimed strengths (and optionally weaknesses) either in the
tags the prompt asks for or under plain "Strengths" / "Weaknesses" headings. A line that only echoes
the prompt's template ("first strength", "second weakness", "...") is no claim: it is dropped and
counted in `echoed`, and an answer left with no strength is rejected (`template_echo`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

STANCES = ("appreciates", "criticizes", "questions", "suggests")
_VERBS = {
    "appreciates": r"appreciat(?:es|ed|e)",
    "criticizes": r"critici[sz](?:es|ed|e)",
    "questions": r"question(?:s|ed)?",
    "suggests": r"suggest(?:s|ed)?",
}
_VERB = "|".join(f"(?P<{stance}>{pattern})" for stance, pattern in _VERBS.items())
_PREFIX = re.compile(rf"^(?:the\s+)?reviewer\s+(?:{_VERB})\b[\s:,\-–]*(?P<rest>.*)$", re.I | re.S)
# sentence ends: a judgment line is cut there; what follows must be a judgment of its own
_SPLIT = re.compile(r"(?<=[.;!?\"”’'])\s+(?=[\"“‘'(]?[A-Z])")
_ECHO = re.compile(r"\breviewer\b|\b(?:appreciates|criticizes|questions|suggests)\s*(?:,|and\b|$)", re.I)
_BULLET = re.compile(r"^(?:[-*•·–—>+]+|\(?\d{1,3}[.):]|\(?[a-hA-H][.)]|#{1,6})\s*")
_WRAP = "\"'“”‘’`*_"


@dataclass
class ParsedJudgments:
    lines: list[tuple[str, str]] = field(default_factory=list)   # (stance, full line)
    dropped: list[tuple[str, str]] = field(default_factory=list)  # (rule, original line)
    repaired: int = 0

    @property
    def usable(self) -> bool:
        return bool(self.lines)


def _clean(line: str) -> str:
    line = line.replace("**", "").replace("__", "").strip()
    previous = None
    while line != previous:
        previous = line
        line = _BULLET.sub("", line).strip()
        line = line.strip(_WRAP).strip()
    return re.sub(r"\s+", " ", line)


def judgment_line(raw: str) -> tuple[str, str] | None:
    """(stance, normalised line) for one cleaned judgment, or None when no stance is recognisable."""
    match = _PREFIX.match(raw)
    if match is None:
        return None
    stance = next(name for name in STANCES if match.group(name))
    rest = match.group("rest").strip().strip(_WRAP).strip()
    if len(re.findall(r"\w+", rest)) < 1 or _ECHO.search(rest):
        return stance, ""   # nothing judged, or the format itself parroted back
    if rest[-1] not in ".!?":
        rest += "."
    return stance, f"The reviewer {stance} {rest}"


def parse_judgments(text: str, truncated: bool = False) -> ParsedJudgments:
    """Kept, repaired and dropped lines of one answer; `truncated`: the answer hit max_tokens."""
    parsed = ParsedJudgments()
    raw_lines = [line for line in text.splitlines() if line.strip()]
    if truncated and raw_lines:
        parsed.dropped.append(("truncated", raw_lines.pop().strip()))
    seen: set[str] = set()
    for raw in raw_lines:
        cleaned = _clean(raw)
        parts = _SPLIT.split(cleaned) if cleaned else []
        if not parts or not cleaned.strip(_WRAP + "-=#~ "):
            parsed.dropped.append(("no_stance", raw.strip()))
            continue
        for part in parts:
            found = judgment_line(_clean(part))
            if found is None:
                parsed.dropped.append(("no_stance", part.strip()))
                continue
            stance, line = found
            if not line:
                parsed.dropped.append(("empty_judgment", part.strip()))
                continue
            if line.lower() in seen:
                parsed.dropped.append(("duplicate", part.strip()))
                continue
            seen.add(line.lower())
            parsed.lines.append((stance, line))
            parsed.repaired += line != raw.strip()
    return parsed


_TAGS = {
    "strengths": re.compile(r"<claimed_strengths>(.*?)(?:</claimed_strengths>|(?=<claimed_weaknesses>)|\Z)", re.S | re.I),
    "weaknesses": re.compile(r"<claimed_weaknesses>(.*?)(?:</claimed_weaknesses>|\Z)", re.S | re.I),
}
_HEADING = re.compile(
    r"^\W*(?:(?:claimed|author[- ]?stated|stated)\s+)?(?P<kind>strengths?|weakness(?:es)?|limitations?)\b[^\n]*?:?\W*$",
    re.I,
)


# a placeholder line of the synopsis prompt's answer shape, or one like it, rather than a claim
_TEMPLATE_ECHO = re.compile(
    r"^(?:(?:first|second|third|fourth|fifth|another|next|last|more|other|one|a|an)\s+)?(?:claimed\s+)?"
    r"(?:strength|weakness|limitation|point)(?:e?s)?(?:\s*(?:\d+|[a-e]))?\W*$|^(?:\.{2,}|…|etc\.?)$",
    re.I)


def template_echo(item: str) -> bool:
    """Whether a synopsis line only repeats the answer template's placeholder ("first strength", "...")."""
    return bool(_TEMPLATE_ECHO.match(item.strip()))


@dataclass
class ParsedSynopsis:
    strengths: list[str] = field(default_factory=list)
    weaknesses: list[str] = field(default_factory=list)
    repaired: bool = False
    echoed: list[str] = field(default_factory=list)   # template lines dropped ("first strength", ...)

    @property
    def usable(self) -> bool:
        return bool(self.strengths)

    def render(self) -> str:
        weaknesses = self.weaknesses or ["none stated"]
        return (
            "Strengths claimed by the authors:\n"
            + "\n".join(f"- {item}" for item in self.strengths)
            + "\nWeaknesses claimed by the authors:\n"
            + "\n".join(f"- {item}" for item in weaknesses)
        )


def _items(block: str, echoed: list[str] | None = None) -> list[str]:
    """The block's claims, one a line; lines that echo the template go to `echoed` instead."""
    items: list[str] = []
    for line in block.splitlines():
        item = _clean(line)
        if item and template_echo(item):
            if echoed is not None:
                echoed.append(item)
            continue
        if item and re.search(r"\w", item) and not item.startswith("<") and item not in items:
            items.append(item)
    return items


def parse_assw(text: str, truncated: bool = False) -> ParsedSynopsis:
    """Claimed strengths and weaknesses from the tags, or else from plain headings."""
    if truncated:
        text = text.rsplit("\n", 1)[0] if "\n" in text else ""
    tagged = {kind: pattern.search(text) for kind, pattern in _TAGS.items()}
    echoed: list[str] = []
    if tagged["strengths"] or tagged["weaknesses"]:
        return ParsedSynopsis(
            *(_items(match.group(1), echoed) if match else [] for match in tagged.values()),  # type: ignore[arg-type]
            echoed=echoed,
        )
    sections: dict[str, list[str]] = {"strengths": [], "weaknesses": []}
    current: str | None = None
    for line in text.splitlines():
        heading = _HEADING.match(line.strip())
        if heading:
            current = "strengths" if heading.group("kind").lower().startswith("strength") else "weaknesses"
            continue
        if current:
            sections[current].extend(_items(line, echoed))
    return ParsedSynopsis(sections["strengths"], sections["weaknesses"], repaired=True, echoed=echoed)
