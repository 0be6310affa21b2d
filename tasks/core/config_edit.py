"""Set keys of one table of a pipelines.toml in place, its comments and layout kept (the calibrate command).

A TOML round trip through a style-keeping writer (tomlkit): the table is found however the file
declares it (`[score.reference_flags]`, a dotted key `score.reference_flags.threshold = 0.9`, an
inline table), its keys replaced or added, and a missing table added. The text is parsed back
(tomllib, the reader every command uses) and must hold exactly the values set before it replaces
the file atomically: a write no command could read is refused with one line, the file untouched.
Values are floats or strings; a string holding what no TOML file can (a lone surrogate: a file name
in bytes that are not UTF-8) keeps a replacement character there, and a surrogate pair is the
character it stands for.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from tasks.core.errors import ConfigError
from tasks.core.locks import write_bytes_atomic


def _value(value: float | str) -> float | str:
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")   # pairs joined, lone ones out
    return float(value)


def set_keys(path: Path, table: str, values: dict[str, float | str]) -> None:
    """Write `values` into `[table]` (a dotted name: "score.reference_flags") of the TOML file at `path`."""
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    wanted = {key: _value(value) for key, value in values.items()}
    try:
        document = tomlkit.parse(text)
        node: Any = document
        for part in table.split("."):
            if part not in node:
                node[part] = tomlkit.table(is_super_table=part != table.split(".")[-1])
            node = node[part]
            if not isinstance(node, dict):
                raise ConfigError(f"{path}: {table} is not a table (it holds {type(node).__name__}); nothing written")
        for key, value in wanted.items():
            node[key] = value
        written = tomlkit.dumps(document)
    except TOMLKitError as error:
        raise ConfigError(f"{path}: cannot set [{table}] ({str(error).splitlines()[0]}); nothing written") from None
    try:
        back: Any = tomllib.loads(written)
        for part in table.split("."):
            back = back[part]
    except (tomllib.TOMLDecodeError, KeyError, TypeError) as error:
        raise ConfigError(f"{path}: setting [{table}] would give a file TOML cannot read ({error}); "
                          "nothing written") from None
    if any(back.get(key) != value for key, value in wanted.items()):
        raise ConfigError(f"{path}: setting [{table}] did not read back as written; nothing written")
    write_bytes_atomic(path, written.encode("utf-8"))
