"""The structure of a review's text: sections under headers, sentences, and two renderings of it.

Shared by the validation strategies (tasks/stages/validate/) and the qualification exam
(tasks/stages/qualify/exam.py), which perturb or polish a review without changing what it says.
"""

from __future__ import annotations

import re

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



# ---------------------------------------------------------------- renderings

MARKDOWN_HEADER = "## Review"


def _sentences(body: str) -> list[str]:
    return [s.strip() for s, _ in split_sentences(body) if s.strip()]


def _is_list(body: str) -> bool:
    """Whether most non-empty lines of a section body are list items."""
    lines = [line for line in body.splitlines() if line.strip()]
    return bool(lines) and sum(bool(_LIST_MARKER.match(line)) for line in lines) * 2 > len(lines)


def _reshape(body: str) -> str:
    """A list becomes one paragraph of its items; prose becomes a numbered list of its sentences."""
    stripped = body.strip()
    if not stripped:
        return body
    lead, tail = body[: len(body) - len(body.lstrip())], body[len(body.rstrip()):]
    if _is_list(stripped):
        items = [_LIST_MARKER.sub("", line).strip() for line in stripped.splitlines() if line.strip()]
        items = [i if re.search(r"[.!?:;]$", i) else f"{i}." for i in items]
        text = " ".join(items)
    else:
        text = "\n".join(f"{k}. {s}" for k, s in enumerate(_sentences(stripped), start=1))
    return lead + text + tail


def format_bullets(review: str) -> str:
    """Each section's prose as a numbered list of its sentences, or a section's list as one paragraph."""
    return "".join((header or "") + _reshape(body) for header, body in split_sections(review))


def _markdown(header: str) -> str:
    bare = header.strip().strip("*_ ").rstrip(":").strip("*_ ").strip()
    if re.match(r"^#{1,6}\s", bare):
        return header
    newline = header[len(header.rstrip("\n")):] or "\n"
    return f"## {bare}{newline}"


def format_headers(review: str) -> str:
    """Every section header as a markdown `##` header; text before the first header gets `## Review`."""
    parts = []
    for header, body in split_sections(review):
        if header is None:
            parts.append(f"{MARKDOWN_HEADER}\n\n{body.lstrip()}" if body.strip() else body)
        else:
            parts.append(_markdown(header) + body)
    return "".join(parts)


