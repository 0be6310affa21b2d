"""Progress with an ETA for long steps, on a terminal and in logs alike.

On a terminal it is an ordinary tqdm bar on stderr. When stderr is not a terminal (a log file, CI,
a captured subprocess) tqdm's carriage-return redraws become one plain line every
`GREBENCH_PROGRESS_SECONDS` seconds (default 30), e.g.
`scoring:  40%|####      | 192/480 [02:10<03:15, 1.47request/s]` - done / total, elapsed < ETA;
a step that ends sooner leaves no line.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, TextIO, TypeVar

from tqdm.auto import tqdm

if TYPE_CHECKING:   # polars only where a frame is scored: the LM layer imports this module on a bare GPU box
    import polars as pl

T = TypeVar("T")


class _Lines:
    """A file for tqdm that turns its \\r redraws into whole lines."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def write(self, text: str) -> None:
        line = text.replace("\r", "").strip()
        if line:
            self.out.write(line + "\n")

    def flush(self) -> None:
        self.out.flush()


def progress(total: int | None, desc: str, unit: str = "item", out: TextIO | None = None,
             iterable: Iterable[T] | None = None, leave: bool = True) -> tqdm:
    """A progress bar for `total` units: a context manager to `.update(n)`, or iterate it when
    `iterable` is given."""
    out = out or sys.stderr
    if out.isatty():
        return tqdm(iterable, total=total, desc=desc, unit=unit, file=out, dynamic_ncols=True, leave=leave)
    every = float(os.environ.get("GREBENCH_PROGRESS_SECONDS", 30))
    return tqdm(iterable, total=total, desc=desc, unit=unit, file=_Lines(out), mininterval=every,
                maxinterval=every, delay=every, ncols=80, ascii=True)   # shorter steps leave no line


def track(items: Sequence[T], desc: str, unit: str = "item") -> Iterator[T]:
    """Iterate `items` with a progress bar (on a terminal) or progress lines (in a log)."""
    return iter(progress(len(items), desc, unit, iterable=items, leave=False))


def scorer_with_progress(scorer: Callable[[pl.DataFrame], pl.DataFrame], chunk: int = 256,
                         desc: str = "scoring", out: TextIO | None = None) -> Callable[[pl.DataFrame], pl.DataFrame]:
    """A scorer (requests frame -> results frame) that scores in chunks and shows progress with an ETA."""
    def score(requests: pl.DataFrame) -> pl.DataFrame:
        if requests.height <= chunk:
            with progress(requests.height, desc, "request", out) as bar:
                results = scorer(requests)
                bar.update(requests.height)
            return results
        parts: list[pl.DataFrame] = []
        with progress(requests.height, desc, "request", out) as bar:
            for part in requests.iter_slices(chunk):
                parts.append(scorer(part))
                bar.update(part.height)
        import polars as pl

        return pl.concat(parts)
    return score

