"""The one prompt loader: every system prompt is a versioned file tasks/prompts/<version>.md.

A prompt's version is its file name, and it is part of every cache key that depends on it, so a
changed prompt is a new file (review-v2.md), never an edit of an old one.
"""

from __future__ import annotations

import functools
from pathlib import Path

PROMPTS = Path(__file__).resolve().parents[1] / "prompts"


@functools.lru_cache(maxsize=64)
def load_prompt(version: str) -> str:
    """The text of tasks/prompts/<version>.md, stripped; a clear error when there is no such version."""
    path = PROMPTS / f"{version}.md"
    if not path.is_file():
        raise ValueError(f"prompt version {version!r} not found ({path})")
    return path.read_text(encoding="utf-8").strip()
