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
    return markdown_rows(cols, [[fmt(row[c]) for c in cols] for row in frame.iter_rows(named=True)])


def markdown_rows(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    """A markdown table of texts already formatted (a `|` in one is escaped)."""
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(header), "|" + "---|" * len(header), *(line(r) for r in body)])


class DownloadError(ValueError):
    """A download that did not end whole within its bounds: one line naming the URL and what happened."""


def download_once(url: str, target: Path, magic: bytes, kind: str, timeout_s: float = 120.0,
                  max_bytes: int = 1 << 30) -> Path:
    """`target`, downloaded from `url` the first time (the download cache: a later call reads the file).

    The one bounded download: the whole answer within `timeout_s` (each read waits at most what is
    left, so a server sending a byte every 0.3 s is cut off too), at most `max_bytes` (a larger
    declared length is refused before the body, a larger body as it passes the bound), and complete
    (fewer bytes than the declared length is a cut body). The body goes to a `.part` file beside
    `target`, renamed only when whole; it must start with `magic`. Every failure is `DownloadError`,
    one line naming the URL (a Git LFS pointer or an error page: "not <kind>")."""
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(target.suffix + ".part")
    try:
        _fetch_bounded(url, partial, timeout_s, max_bytes)
        with partial.open("rb") as file:
            if file.read(len(magic)) != magic:
                raise DownloadError(f"{url}: not {kind} (a Git LFS pointer or an error page)")
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def _fetch_bounded(url: str, partial: Path, timeout_s: float, max_bytes: int) -> None:
    import http.client
    import time
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout_s
    size, declared = 0, None
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer, partial.open("wb") as out:  # noqa: S310 - http(s) URLs only, checked by callers
            declared = answer.headers.get("Content-Length")
            declared = int(declared) if declared and declared.strip().isdigit() else None
            if declared is not None and declared > max_bytes:
                raise DownloadError(f"{url}: declares {declared:,} bytes, more than the {max_bytes:,} allowed")
            sock = getattr(getattr(answer.fp, "raw", None), "_sock", None)   # each read waits what is left
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DownloadError(f"{url}: not downloaded within {timeout_s:g} s ({size:,} bytes came)")
                if sock is not None:
                    sock.settimeout(left)
                chunk = answer.read1(1 << 16)
                if not chunk:
                    break
                size += len(chunk)
                if size > max_bytes:
                    raise DownloadError(f"{url}: more than the {max_bytes:,} bytes allowed")
                out.write(chunk)
    except DownloadError:
        raise
    except TimeoutError:   # socket.timeout is TimeoutError
        raise DownloadError(f"{url}: not downloaded within {timeout_s:g} s ({size:,} bytes came)") from None
    except http.client.IncompleteRead as error:
        raise DownloadError(f"{url}: the body was cut short ({size + len(error.partial):,} bytes came)") from None
    except urllib.error.HTTPError as error:
        raise DownloadError(f"{url}: the server answered {error.code} {error.reason}") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as error:
        why = getattr(error, "reason", None) or error
        raise DownloadError(f"{url}: {type(error).__name__}: {str(why).splitlines()[0] if str(why) else ''}") from None
    if declared is not None and size < declared:
        raise DownloadError(f"{url}: the body was cut short ({size:,} of {declared:,} bytes came)")
