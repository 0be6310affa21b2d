"""What the report and the site share: reading the results database, plots, markdown tables."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import polars as pl


def read_tables(database: Path, names: Sequence[str]) -> dict[str, pl.DataFrame]:
    """The tables `names` of a DuckDB results file; a table the pipeline has not built yet is empty."""
    from tasks.core import damage

    if not Path(database).is_file():
        raise FileNotFoundError(f"no results database at {database}: run `grebench run demo` first")
    with damage.results_database(database) as con, damage.reading(database, damage.REBUILD):
        present = {row[0] for row in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'").fetchall()}
        return {name: con.sql(f'SELECT * FROM "{name}"').pl() if name in present else pl.DataFrame()
                for name in names}


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def finite(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def fmt(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.3g}" if abs(value) < 1e-3 and value else f"{value:.3f}"
    return str(value)


def markdown_table(frame: pl.DataFrame, columns: list[str]) -> str:
    cols = [c for c in columns if c in frame.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(row[c]) for c in cols) + " |" for row in frame.iter_rows(named=True)]
    return "\n".join(lines)


def download_once(url: str, target: Path, magic: bytes, kind: str, timeout_s: float = 120.0) -> Path:
    """`target`, downloaded from `url` the first time (the download cache: a later call reads the file).
    The answer must start with `magic`, else ValueError naming the URL (a Git LFS pointer, an error page)."""
    import urllib.request

    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(target.suffix + ".part")
    with urllib.request.urlopen(url, timeout=timeout_s) as answer:   # noqa: S310 - http(s) URLs only, checked by callers
        partial.write_bytes(answer.read())
    if partial.read_bytes()[:len(magic)] != magic:
        partial.unlink()
        raise ValueError(f"{url}: not {kind} (a Git LFS pointer or an error page)")
    partial.replace(target)
    return target
