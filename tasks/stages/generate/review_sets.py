"""What the generate stage reviews and what comes back: a set of papers with their texts (the
benchmark papers, or the injection track's planted copies), the text each paper is read from, and
one candidate's output for a set. Shared by the reviews (tasks/stages/generate/reviews.py) and the
injection track (tasks/stages/generate/injection.py), so that neither of those imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl


def paper_text(row: dict[str, Any], pdf_text: str | None) -> tuple[str, str]:
    """(text, source): the PDF text, else the title and abstract, else ("", "none")."""
    if pdf_text and pdf_text.strip():
        return pdf_text.strip(), "pdf_text"
    title, abstract = (row.get("title") or "").strip(), (row.get("abstract") or "").strip()
    if abstract:
        return f"{title}\n\nAbstract\n{abstract}".strip(), "abstract"
    return "", "none"


@dataclass
class GenerateOutput:
    candidates: pl.DataFrame
    rejects: pl.DataFrame
    usage: pl.DataFrame
    stats: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ReviewSet:
    """Papers to review and the texts they are read from (`pdf_texts`: paper_id, text; None: the
    abstracts): the benchmark papers, or the injection track's planted copies of some of them, whose
    candidate ids carry `suffix` so that the sets' reviews stay apart."""

    papers: pl.DataFrame
    pdf_texts: pl.DataFrame | None
    suffix: str = ""
