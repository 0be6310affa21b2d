"""One guarded way to open the files the project reads: damage becomes one line naming the file.

A results database, a stage's Parquet output, a run record or the LLM cache can be cut short (a
full disk, a copy interrupted), emptied or overwritten. Opened through this module, such a file
stops the command with one `DamagedFileError` line (exit 2) that names the file, says what is wrong
with it and what to do, never a traceback from DuckDB, polars, json or sqlite3:

- `reading(path, fix)`: a block whose DuckDB / polars / JSON / SQLite errors mean `path` is damaged;
- `read_parquet(path, columns, required=...)`: a Parquet file, with the columns a reader needs;
- `read_json(path)`: a JSON file (a run record, a receipt);
- `results_database(path)`: a results database opened read-only.

An error of the machine's situation (a full disk, a read-only folder: flows/cli/failures.py)
passes through unchanged, as does Ctrl-C.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tasks.core.errors import FatalError, printable

RERUN = "move it aside and rerun the stage that writes it"
SITUATIONS = ("No space left on device", "Read-only file system", "Permission denied", "os error 28",
              "os error 30", "os error 13", "database or disk is full")
REBUILD = "move it aside and rebuild it (grebench run <pipeline> --stages materialize)"


if TYPE_CHECKING:   # polars only where a frame is read: the LM layer imports this module on a bare GPU box
    import polars as pl


class DamagedFileError(FatalError):
    """A file the project wrote (or was given) that cannot be read as what it should be."""


def _damage() -> tuple[type[BaseException], ...]:
    import duckdb
    import polars as pl

    return (duckdb.Error, pl.exceptions.PolarsError, pl.exceptions.PanicException, json.JSONDecodeError,
            UnicodeDecodeError, sqlite3.DatabaseError, RecursionError)


def _what(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return printable(f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": "), 300)


def damaged(path: Path | str, what: str, fix: str = RERUN) -> DamagedFileError:
    return DamagedFileError(f"{path} is damaged or not what it should be ({what}): {fix}")


@contextmanager
def reading(path: Path | str, fix: str = RERUN) -> Iterator[None]:
    """A block that reads `path`: a reader's error in it is one `DamagedFileError` naming `path`."""
    try:
        yield
    except DamagedFileError:
        raise
    except _damage() as error:
        if any(words in str(error) for words in SITUATIONS):   # the CLI's line for these (flows/cli/failures.py)
            raise
        raise damaged(path, _what(error), fix) from None


def read_parquet(path: Path | str, columns: Sequence[str] | None = None, *, required: Sequence[str] = (),
                 fix: str = RERUN) -> pl.DataFrame:
    """The Parquet file `path` (its `columns`, when given); one line when it is damaged or lacks a
    column in `columns` or `required`."""
    with reading(path, fix):
        import polars as pl

        schema = pl.read_parquet_schema(path)
        missing = [c for c in (*(columns or ()), *required) if c not in schema]
        if missing:
            raise damaged(path, f"no column {', '.join(map(repr, missing))}", fix)
        return pl.read_parquet(path, columns=list(columns) if columns is not None else None)


def read_json(path: Path | str, fix: str = RERUN) -> Any:
    """The JSON document in `path`; one line when it is damaged."""
    with reading(path, fix):
        return json.loads(Path(path).read_text(encoding="utf-8"))


def results_database(path: Path | str) -> Any:
    """A read-only DuckDB connection to the results database `path`; one line when it is damaged.
    Reading its tables stays the caller's: wrap it in `reading(path, REBUILD)`."""
    import duckdb

    with reading(path, REBUILD):
        con = duckdb.connect(str(path), read_only=True)
        try:
            con.execute("SELECT count(*) FROM information_schema.tables").fetchone()
        except BaseException:
            con.close()
            raise
        return con
