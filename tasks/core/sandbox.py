"""The DuckDB connection `grebench query` runs user SQL in, and the exporters for its result.

The statement-type check in the CLI gives a friendly one-line refusal, but DuckDB itself is the
guard: the database is opened read-only, with every file-system and network access off
(`enable_external_access = false`: no COPY / EXPORT / IMPORT / ATTACH, no read_csv, read_text,
glob or read_parquet of any file or URL, no secrets, no extension install), extensions neither
autoloaded nor loadable, and the configuration locked before the user's SQL runs, so no `SET` or
`PRAGMA` can undo any of it, nor raise the memory, spill and thread limits set with it. The results database holds materialized tables (views only over
those tables), so queries never need to read a file.
"""

from __future__ import annotations

import base64
import csv
import json
import math
from collections.abc import Iterator
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, TextIO
from uuid import UUID

import duckdb

SANDBOX = {
    "access_mode": "READ_ONLY",
    "enable_external_access": False,
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "allow_community_extensions": False,
    "allow_unsigned_extensions": False,
    "lock_configuration": True,   # last: nothing after this can change a setting
}
CHUNK_ROWS = 10_000


def connect_sandboxed(database: Path, memory_limit_mb: int | None = None, max_spill_mb: int | None = None,
                      threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """A read-only connection to `database` that cannot touch any other file, URL or extension,
    with the given memory, spill and thread limits set (and locked) before any SQL runs."""
    limits: dict[str, object] = {}
    if memory_limit_mb is not None:
        limits["memory_limit"] = f"{memory_limit_mb}MB"
    if max_spill_mb is not None:
        limits["max_temp_directory_size"] = f"{max_spill_mb}MB"
    if threads is not None:
        limits["threads"] = threads
    return duckdb.connect(str(database), read_only=True, config={**limits, **SANDBOX})


def _plain(value: Any) -> Any:
    """A DuckDB Python value as plain JSON data (lists, dicts with string keys, str / numbers)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Decimal):
        as_float = float(value)
        return as_float if math.isfinite(as_float) and Decimal(repr(as_float)) == value else str(value)
    if isinstance(value, timedelta):
        return iso_duration(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, dict):
        return {k if isinstance(k, str) else json.dumps(_plain(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_plain(v) for v in value]
    return str(value)


def iso_duration(value: timedelta) -> str:
    """An ISO 8601 duration, e.g. P30DT3H: DuckDB hands intervals to Python as timedeltas."""
    sign = "-" if value < timedelta(0) else ""
    value = abs(value)
    seconds = value.seconds + value.microseconds / 1e6
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    clock = "".join(f"{n:g}{unit}" for n, unit in ((hours, "H"), (minutes, "M"), (secs, "S")) if n)
    return f"{sign}P{value.days}D" + (f"T{clock}" if clock else "")


def _cell(value: Any) -> Any:
    """One CSV cell: nested values as JSON text, everything else as its plain text."""
    plain = _plain(value)
    if isinstance(plain, list | dict):
        return json.dumps(plain, ensure_ascii=False)
    return "" if plain is None else plain


def _columns(cursor: duckdb.DuckDBPyConnection) -> list[str]:
    return [d[0] for d in cursor.description or ()]


def _rows(cursor: duckdb.DuckDBPyConnection) -> Iterator[tuple]:
    while chunk := cursor.fetchmany(CHUNK_ROWS):
        yield from chunk


def write_csv(cursor: duckdb.DuckDBPyConnection, out: TextIO) -> None:
    """The pending result of `con.execute(...)` as CSV; nested values as JSON text."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(_columns(cursor))
    for row in _rows(cursor):
        writer.writerow([_cell(v) for v in row])


def write_json(cursor: duckdb.DuckDBPyConnection, out: TextIO) -> None:
    """The pending result of `con.execute(...)` as a JSON array of row objects, written as fetched."""
    columns = _columns(cursor)
    out.write("[")
    for i, row in enumerate(_rows(cursor)):
        out.write(("," if i else "") + json.dumps(dict(zip(columns, map(_plain, row), strict=True)),
                                                   ensure_ascii=False, allow_nan=False))
    out.write("]\n")
