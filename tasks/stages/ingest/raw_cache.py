"""The download caches (raw API pages under data/raw/, PDFs): read back, or quarantined when damaged."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def read_cached(path: Path, root: Path, problem: Callable[[Any], str | None]) -> Any | None:
    """The JSON in cache file `path`, or None when there is none or it is unusable.

    An unusable entry (empty, truncated, binary, the wrong shape: `problem(content)` names what is
    wrong) is moved to `<root>/quarantine/` for inspection, with one line of log, so the caller
    fetches it again instead of failing on every rerun.
    """
    if not path.exists():
        return None
    try:
        content = json.loads(path.read_bytes().decode("utf-8", "surrogatepass"))
        why = problem(content)
    except (ValueError, UnicodeDecodeError) as error:   # JSONDecodeError is a ValueError
        content, why = None, f"{type(error).__name__}: {error}"
    if why is None:
        return content
    quarantine(path, root, why)
    return None


def quarantine(path: Path, root: Path, why: str) -> Path:
    """Move a damaged cache file (a page, a PDF) to `<root>/quarantine/`, with one line of log, so it
    is fetched again."""
    aside = root / "quarantine" / f"{path.relative_to(root).as_posix().replace('/', '__')}.{int(time.time())}"
    aside.parent.mkdir(parents=True, exist_ok=True)
    os.replace(path, aside)
    log.warning("bad cache entry %s quarantined as %s (%s); fetching it again", path, aside, why[:200])
    return aside
