"""Crash-safe writes: file locks, unique scratch names, atomic swaps, and recovery of what a
killed process left behind.

Every multi-step write goes the same way: take the lock of what is written (an fcntl lock on a
`<name>.lock` file beside it, released by the kernel when the holder dies, so a kill -9 never
leaves a stale lock), write a scratch file whose name is unique to this process and call
(`.<name>.<pid>.<uuid>.tmp`), then `os.replace` it over the target. A second writer waits for the
lock (`GREBENCH_LOCK_TIMEOUT` seconds, default 600) and then stops with a message naming the lock.
Scratch files are only ever created under the lock, so whatever matches the scratch pattern
while we hold it was left by a dead process and is removed.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
from filelock import FileLock, Timeout

from tasks.core.errors import LockTimeout

log = logging.getLogger(__name__)
DEFAULT_LOCK_TIMEOUT_S = 600.0


def lock_timeout() -> float:
    return float(os.environ.get("GREBENCH_LOCK_TIMEOUT", DEFAULT_LOCK_TIMEOUT_S))


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


@contextmanager
def locked(path: Path, timeout: float | None = None) -> Iterator[None]:
    """Hold the exclusive lock of `path` (file `<path>.lock`); wait at most `timeout` seconds."""
    timeout = lock_timeout() if timeout is None else timeout
    target = lock_path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(target))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.warning("waiting for %s: another grebench process is writing %s", target, path.name)
        try:
            lock.acquire(timeout=timeout)
        except Timeout:
            raise LockTimeout(
                f"{path} is being written by another grebench process (lock {target} held for more "
                f"than {timeout:g} s); wait for it to finish, or raise GREBENCH_LOCK_TIMEOUT"
            ) from None
    try:
        yield
    finally:
        lock.release()


def scratch_path(path: Path) -> Path:
    """A scratch name beside `path`, unique to this process and call."""
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")


def stale_scratch(path: Path) -> list[Path]:
    """Scratch files of `path` (and their DuckDB WALs) left by earlier processes."""
    return sorted(path.parent.glob(f".{path.name}.*.tmp*")) + sorted(
        path.parent.glob(f"{path.name}.building*")  # the scratch name of older versions
    )


def remove_stale_scratch(path: Path) -> None:
    """Delete scratch files a killed writer left; call only while holding the lock of `path`."""
    for leftover in stale_scratch(path):
        log.info("removing %s, left by an interrupted write", leftover)
        leftover.unlink(missing_ok=True)


def write_atomic(path: Path, write: Callable[[Path], object]) -> Path:
    """Call `write(scratch)` then swap the scratch file in as `path`; the scratch never lingers."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = scratch_path(path)
    try:
        write(scratch)
        os.replace(scratch, path)
    finally:
        scratch.unlink(missing_ok=True)
    return path


def write_bytes_atomic(path: Path, data: bytes) -> Path:
    """`data` as the whole of `path`, swapped in atomically (see `write_atomic`)."""
    return write_atomic(Path(path), lambda scratch: scratch.write_bytes(data))


# ---- DuckDB databases -------------------------------------------------------------------------

def built_for(database: Path) -> str | None:
    """The pipeline whose results `database` holds (its `_build` table), or None when unknown."""
    if not database.is_file():
        return None
    try:
        with duckdb.connect(str(database), read_only=True) as con:
            return con.execute("SELECT any_value(pipeline) FROM _build").fetchone()[0]
    except duckdb.Error:
        return None


def wal_path(database: Path) -> Path:
    return database.with_name(database.name + ".wal")


def recover_database(database: Path) -> None:
    """Make `database` openable after a crash; call only while holding its lock.

    A WAL beside it is replayed and checkpointed when it belongs to the file; one that does not
    (the file was swapped after the crash: "WAL does not match database file") or that DuckDB
    cannot replay (damaged: it opens the file, ignores the WAL and leaves it there) is moved aside
    as `<name>.wal.stale-<time>` for inspection, with one line of log. Readers (`grebench query`)
    and writers (materialize) both call this, so such a WAL is set aside once, by whoever comes first.
    """
    remove_stale_scratch(database)
    wal = wal_path(database)
    if not wal.exists():
        return
    if not database.exists():
        _quarantine_wal(wal, "no database file beside it")
        return
    try:
        with duckdb.connect(str(database)) as con:
            con.execute("CHECKPOINT")
    except duckdb.Error as error:
        _quarantine_wal(wal, str(error).splitlines()[0])
        return
    if wal.exists() and wal.stat().st_size:   # a checkpoint empties a WAL it replayed
        _quarantine_wal(wal, "DuckDB could not replay it")


def _quarantine_wal(wal: Path, why: str) -> None:
    aside = wal.with_name(f"{wal.name}.stale-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}")
    os.replace(wal, aside)
    log.warning("moved the stale WAL %s aside to %s (%s)", wal, aside.name, why)


def swap_database(scratch: Path, database: Path) -> None:
    """Swap a closed, checkpointed scratch database in as `database` (under its lock)."""
    wal_path(database).unlink(missing_ok=True)   # belongs to the file being replaced
    os.replace(scratch, database)


def copy_database(database: Path, scratch: Path) -> None:
    shutil.copyfile(database, scratch)


def discard(scratch: Path) -> None:
    scratch.unlink(missing_ok=True)
    wal_path(scratch).unlink(missing_ok=True)
