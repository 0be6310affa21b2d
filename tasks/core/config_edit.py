"""Set keys of one table of a pipelines.toml in place, its comments and layout kept (the calibrate command).

A plain text edit, not a TOML round trip: the key's line in the table is replaced, or the key is
added at the table's end; a missing table is appended. Values are floats or strings.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tasks.core.locks import write_bytes_atomic


def _literal(value: float | str) -> str:
    return json.dumps(value) if isinstance(value, str) else repr(float(value))


def set_keys(path: Path, table: str, values: dict[str, float | str]) -> None:
    """Write `values` into `[table]` of the TOML file at `path`."""
    text = path.read_text() if path.is_file() else ""
    lines = text.splitlines()
    header = re.compile(rf"^\s*\[{re.escape(table)}\]\s*(#.*)?$")
    start = next((i for i, line in enumerate(lines) if header.match(line)), None)
    if start is None:
        lines += ["", f"[{table}]", *(f"{k} = {_literal(v)}" for k, v in values.items())]
    else:
        end = next((i for i in range(start + 1, len(lines)) if re.match(r"^\s*\[", lines[i])), len(lines))
        while end > start + 1 and not lines[end - 1].strip():
            end -= 1
        for key, value in values.items():
            own = re.compile(rf"^\s*{re.escape(key)}\s*=")
            at = next((i for i in range(start + 1, end) if own.match(lines[i])), None)
            line = f"{key} = {_literal(value)}"
            if at is None:
                lines.insert(end, line)
                end += 1
            else:
                lines[at] = line
    write_bytes_atomic(path, ("\n".join(lines) + "\n").encode())
