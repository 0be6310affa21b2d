"""Reading a file of submitted reviews, row by row, so that no row is lost.

Formats (by extension): Parquet (.parquet), CSV (.csv, UTF-8, a header row) and JSON Lines
(.jsonl / .ndjson, one object per line). Columns: `paper_id` and `review` are required;
`rating` (on the common scale), `confidence` (on the confidence scale) and `model` (free text:
the system's name, version, settings) are optional. Any other column is an error for the whole
file (a typo such as `reveiw` must not pass silently).

Every row of the file ends in exactly one of two lists: `rows` (read, with its values) or
`rejects` (with a rule and a detail): a CSV row with bytes that are not UTF-8 (`bad_encoding`), a
JSON Lines line that is not a JSON object (`bad_json`), a value of the wrong type (`wrong_type`:
a number where text is expected, text that is not a number for rating or confidence), a rating or
confidence that is NaN (`bad_rating`, `bad_confidence`: leave it out for none). What the
values mean (known paper, duplicates, length) is checked by tasks/stages/generate/submit.py.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tasks.core.errors import GrebenchError

REQUIRED = ("paper_id", "review")
OPTIONAL = ("rating", "confidence", "model")
TEXT = ("paper_id", "review", "model")
NUMBERS = ("rating", "confidence")
FORMATS = {".parquet": "parquet", ".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
FIELD_LIMIT = 2**31 - 1   # characters of one CSV field (Python's default, 131,072, refused the whole file)


class SubmissionFileError(GrebenchError, ValueError):
    """The file as a whole cannot be read (format, header, columns): one line for the user."""


@dataclass
class ReadRows:
    """The file's rows: `rows` (row number from 1, values) and `rejects` (row number, rule, detail)."""

    fmt: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    rejects: list[dict[str, Any]] = field(default_factory=list)

    @property
    def n_rows(self) -> int:
        return len(self.rows) + len(self.rejects)


def file_format(path: Path) -> str:
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise SubmissionFileError(f"{path.name}: unknown format {path.suffix or '(no extension)'!r}; "
                                  "give a .parquet, .csv or .jsonl file")
    return fmt


def check_columns(columns: list[str], where: str) -> None:
    missing = [c for c in REQUIRED if c not in columns]
    if missing:
        raise SubmissionFileError(f"{where}: missing column(s) {missing}; a submission needs paper_id and review")
    unknown = [c for c in columns if c not in REQUIRED + OPTIONAL]
    if unknown:
        raise SubmissionFileError(f"{where}: unknown column(s) {unknown}; allowed: {', '.join(REQUIRED + OPTIONAL)}")
    repeated = sorted({c for c in columns if columns.count(c) > 1})
    if repeated:
        raise SubmissionFileError(f"{where}: column(s) {repeated} appear more than once")


def _bad_text(value: str) -> str | None:
    """Why a text cannot be used as it stands (undecodable bytes, NUL, replacement characters), or None."""
    if any("\udc80" <= ch <= "\udcff" for ch in value):
        return "bytes that are not UTF-8"
    if "\x00" in value:
        return "a NUL character"
    if "\ufffd" in value:
        return "U+FFFD replacement characters (text decoded with the wrong encoding)"
    return None


def typed_row(raw: dict[str, Any], from_text: bool) -> tuple[dict[str, Any] | None, str, str]:
    """(values, "", "") for a usable row, else (None, rule, detail). `from_text`: every value came as
    a string (CSV), so numbers are parsed; otherwise a number must already be one."""
    values: dict[str, Any] = {}
    for name in TEXT:
        value = raw.get(name)
        if value is None or (from_text and name == "model" and value == ""):
            values[name] = None
            continue
        if not isinstance(value, str):
            return None, "wrong_type", f"{name} must be text, got {type(value).__name__} {str(value)[:60]!r}"
        problem = _bad_text(value)
        if problem:
            return None, "bad_encoding", f"{name} holds {problem}"
        values[name] = value
    for name in NUMBERS:
        value = raw.get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            values[name] = None
            continue
        if isinstance(value, bool) or not isinstance(value, int | float | str) or (isinstance(value, str)
                                                                                   and not from_text):
            return None, "wrong_type", f"{name} must be a number, got {type(value).__name__} {str(value)[:60]!r}"
        try:
            number = float(value)
        except ValueError:
            return None, "wrong_type", f"{name} must be a number, got {str(value)[:60]!r}"
        if math.isnan(number):     # not "no rating": a value that says nothing is refused, as on the scale
            return None, f"bad_{name}", f"{name} is NaN; leave it out (or empty) for no {name}"
        if math.isinf(number):
            return None, "wrong_type", f"{name} is infinite"
        values[name] = number
    return values, "", ""


def _add(out: ReadRows, number: int, raw: dict[str, Any], from_text: bool) -> None:
    values, rule, detail = typed_row(raw, from_text)
    if values is None:
        paper = raw.get("paper_id")
        out.rejects.append({"row": number, "paper_id": paper if isinstance(paper, str) and not _bad_text(paper)
                            else None, "rule": rule, "detail": detail})
    else:
        out.rows.append({"row": number, **values})


def read_parquet_rows(path: Path) -> ReadRows:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as error:  # noqa: BLE001 - pyarrow raises many types for a damaged file
        raise SubmissionFileError(f"{path.name}: not a readable Parquet file ({str(error).splitlines()[0]})") from None
    check_columns(table.column_names, path.name)
    out = ReadRows("parquet")
    for number, raw in enumerate(_arrow_rows(table), 1):
        _add(out, number, raw, from_text=False)
    return out


def _arrow_rows(table: Any) -> list[dict[str, Any]]:
    """Rows as Python values; a string column with bytes that are not UTF-8 gives surrogate escapes."""
    import pyarrow as pa

    columns = {}
    for name in table.column_names:
        column = table.column(name)
        if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
            columns[name] = [None if v is None else v.decode("utf-8", "surrogateescape") for v in column.to_pylist()]
            continue
        try:
            columns[name] = column.to_pylist()
        except (UnicodeDecodeError, pa.ArrowInvalid):   # a string column holding invalid UTF-8
            raw = column.cast(pa.binary()).to_pylist()
            columns[name] = [None if v is None else v.decode("utf-8", "surrogateescape") for v in raw]
    return [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]


def read_csv_rows(path: Path) -> ReadRows:
    """Rows of a CSV file; a field of any length is read (a review too long is that row's reject, later)."""
    limit = csv.field_size_limit(FIELD_LIMIT)
    try:
        return _read_csv_rows(path)
    finally:
        csv.field_size_limit(limit)


def _read_csv_rows(path: Path) -> ReadRows:
    text = path.read_bytes().decode("utf-8", "surrogateescape").removeprefix("\ufeff")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        raise SubmissionFileError(f"{path.name}: the file is empty (a header row with paper_id,review is needed)") \
            from None
    except csv.Error as error:
        raise SubmissionFileError(f"{path.name}: not readable as CSV ({error})") from None
    header = [h.strip() for h in header]
    check_columns(header, path.name)
    out = ReadRows("csv")
    number = 0
    while True:
        try:
            record = next(reader)
        except StopIteration:
            break
        except csv.Error as error:
            raise SubmissionFileError(f"{path.name}: CSV row {number + 1}: {error}") from None
        number += 1
        if not record:
            number -= 1       # a blank line is not a row
            continue
        if len(record) != len(header):
            out.rejects.append({"row": number, "paper_id": None, "rule": "wrong_columns",
                                "detail": f"{len(record)} fields, the header has {len(header)}"})
            continue
        _add(out, number, dict(zip(header, record, strict=True)), from_text=True)
    return out


def parse_json_line(text: str) -> tuple[Any, str]:
    """(value, "") of one JSON line, else (None, why not): bad JSON, nesting too deep for the parser,
    an integer of more digits than Python converts."""
    try:
        return json.loads(text), ""
    except json.JSONDecodeError as error:
        return None, f"{error.msg} at column {error.colno}"
    except RecursionError:
        return None, "nested too deeply to read"
    except ValueError as error:      # e.g. "Exceeds the limit (4300 digits) for integer string conversion"
        return None, str(error).splitlines()[0][:120]


def read_jsonl_rows(path: Path) -> ReadRows:
    out = ReadRows("jsonl")
    columns_seen: set[str] = set()
    lines = path.read_bytes().splitlines()
    number = 0
    for line in lines:
        if not line.strip():
            continue
        number += 1
        text = line.decode("utf-8", "surrogateescape").removeprefix("\ufeff")
        value, problem = parse_json_line(text)
        if problem:
            rule = "bad_encoding" if _bad_text(text) else "bad_json"
            out.rejects.append({"row": number, "paper_id": None, "rule": rule, "detail": f"line {number}: {problem}"})
            continue
        if not isinstance(value, dict):
            out.rejects.append({"row": number, "paper_id": None, "rule": "bad_json",
                                "detail": f"line {number}: a JSON {type(value).__name__}, not an object"})
            continue
        columns_seen |= set(value)
        _add(out, number, value, from_text=False)
    if number == 0:
        raise SubmissionFileError(f"{path.name}: the file has no lines")
    unknown = sorted(columns_seen - set(REQUIRED + OPTIONAL))
    if unknown:
        raise SubmissionFileError(f"{path.name}: unknown key(s) {unknown}; allowed: {', '.join(REQUIRED + OPTIONAL)}")
    return out


def read_rows(path: Path) -> ReadRows:
    """The file's rows and per-row rejects; a file-wide problem raises SubmissionFileError."""
    path = Path(path)
    if not path.is_file():
        raise SubmissionFileError(f"{path}: no such file")
    fmt = file_format(path)
    return {"parquet": read_parquet_rows, "csv": read_csv_rows, "jsonl": read_jsonl_rows}[fmt](path)
