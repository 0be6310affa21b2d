"""Failures the command line reports in one line: the machine's situations (a full disk, a read-only
folder, in Python, polars, DuckDB or SQLite words) and the known failures whose tracebacks Prefect's logs leave out."""

from __future__ import annotations

import errno
import logging

# The situations of the machine rather than of the code: said in one line, never a traceback.
SITUATIONS = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
              errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied",
              errno.EPERM: "operation not permitted", errno.EFBIG: "the file is too large for this file system"}
SQLITE_SITUATIONS = {"database or disk is full": "the disk is full", "readonly database": "the file system is "
                     "read-only", "unable to open database file": "a database file cannot be opened or created",
                     "disk I/O error": "a disk I/O error"}
DUCKDB_SITUATIONS = {"No space left on device": "the disk is full", "Read-only file system": "the file system is "
                     "read-only", "Permission denied": "permission denied", "Disk quota exceeded": "the disk quota "
                     "is used up"}

# polars (Rust) says an OS error in its text, without an errno: "No space left on device (os error 28)"
RUST_SITUATIONS = {f"(os error {code})": words for code, words in SITUATIONS.items()}


def situation(error: BaseException) -> str | None:
    """One line for an error the machine's state caused (disk full, read-only folder), else None."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in SITUATIONS:
            where = f": {error.filename}" if error.filename else ""
            return f"{SITUATIONS[error.errno]}{where} ({error.strerror}); nothing already written was lost"
        text = str(error)
        hit = next((s for s in DUCKDB_SITUATIONS if s in text), None)
        if hit and type(error).__module__.startswith(("duckdb", "_duckdb")):
            detail = text.splitlines()[0].split("because of error: ")[-1]
            return f"{DUCKDB_SITUATIONS[hit]} ({detail}); nothing already written was lost"
        hit = next((words for code, words in RUST_SITUATIONS.items() if code in text), None)
        if hit and (type(error).__module__.startswith("polars") or isinstance(error, OSError)):
            return f"{hit} ({text.splitlines()[0][-200:]}); nothing already written was lost"
        hit = next((s for s in SQLITE_SITUATIONS if s in text), None)
        if hit and type(error).__module__ == "sqlite3":
            return f"{SQLITE_SITUATIONS[hit]} ({text.splitlines()[0]}, the LLM cache); nothing already written was lost"
        error = error.__cause__ or error.__context__
    return None


class KnownFailureFilter(logging.Filter):
    """Drops the traceback from Prefect's log record of a failure the CLI reports in one line
    (a FatalError, a full disk, a read-only folder); the record's own line stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        from tasks.core.errors import GrebenchError

        error = record.exc_info[1] if record.exc_info else None
        if error is not None and (_raised_during(error, GrebenchError) or situation(error) is not None):
            record.exc_info, record.exc_text = None, None
        return True


def _raised_during(error: BaseException | None, kind: type[BaseException]) -> bool:
    """Whether `error`, or one it was raised from or while handling, is a `kind` (an event Prefect
    fails to send while a task's AuthenticationError unwinds carries that error as its context)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, kind):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def quiet_known_failures() -> None:
    for name in ("prefect.task_runs", "prefect.flow_runs", "prefect.flow_engine", "prefect.task_engine",
                 "prefect.events.utilities"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, KnownFailureFilter) for f in logger.filters):
            logger.addFilter(KnownFailureFilter())
