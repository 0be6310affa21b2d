"""`grebench query`: read-only SQL against one pipeline's results database, with limits.

The limits come from `[query]` in pipelines.toml (`--timeout` overrides the time limit) and are
set before the user's SQL runs: DuckDB's memory_limit, max_temp_directory_size (spill files) and
threads, then `lock_configuration`, so no statement can raise them (tasks/core/sandbox.py). DuckDB does
not count every allocation against memory_limit (one `repeat('x', 4000000000)` is a single 4 GB
string), so the process's address space is capped as well, for the time of the query: such an
allocation fails at once as "Out of Memory" instead of growing for a minute.

The SQL runs in a worker thread while the main thread waits for it. When the time limit passes,
or on Ctrl-C, the main thread calls DuckDB's `interrupt()` and the command exits at once: 124
after a timeout, 130 after Ctrl-C (the worker is a daemon thread and never holds the exit up, even
inside a DuckDB function that does not check for interrupts).
"""

from __future__ import annotations

import contextlib
import resource
import sys
import threading
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from flows.cli.common import ConfigOption, fail, read_config, results_database

READ_ONLY_STATEMENTS = {"SELECT", "EXPLAIN", "PRAGMA"}
EXIT_TIMEOUT = 124     # as timeout(1)
MAX_TIMEOUT_S = 7 * 86400.0   # the longest --timeout (a week)
MAX_ROWS = 10_000_000         # the most rows --max-rows shows
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it
GRACE_SECONDS = 2.0    # after interrupt(): time the worker gets to stop before we exit anyway


class Format(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


def check_read_only(sql: str) -> None:
    """Refuse anything but reading statements, with a message that says which statement."""
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as error:
        raise ValueError(f"cannot parse the query: {str(error).splitlines()[0]}") from None
    if not statements:
        raise ValueError("the query is empty")
    for statement in statements:
        kind = statement.type.name
        if kind not in READ_ONLY_STATEMENTS:
            raise ValueError(
                f"grebench query is read-only: {kind} statements are refused "
                f"({statement.query.strip()[:60]!r}); results are rebuilt by `grebench run <pipeline>`"
            )


def name_os_thread(name: bytes) -> None:
    """Give the calling thread an OS-visible name (Linux prctl PR_SET_NAME; elsewhere nothing)."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None).prctl(15, ctypes.c_char_p(name[:15]), 0, 0, 0)


def _vm_size() -> int:
    """Bytes of address space this process uses now (0 where /proc cannot tell)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


@contextlib.contextmanager
def address_space_cap(extra_bytes: int):
    """Cap RLIMIT_AS at what the process uses now plus `extra_bytes`; the old limit comes back after."""
    used = _vm_size()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = used + extra_bytes
    if not used or (soft != resource.RLIM_INFINITY and soft <= cap) or (hard != resource.RLIM_INFINITY and hard < cap):
        yield
        return
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def query(
    sql: Annotated[str, typer.Argument(help="read-only SQL, e.g. \"select count(*) from reviews\"; - reads stdin")],
    format: Annotated[Format, typer.Option("--format", "-f")] = Format.table,
    max_rows: Annotated[int, typer.Option(help="rows shown in table format")] = 200,
    pipeline: Annotated[str | None, typer.Option("--pipeline", "-p", help="whose results (default: the "
                                                 "newest database)")] = None,
    timeout: Annotated[float | None, typer.Option("--timeout", "-t", help="seconds before the query is "
                                                  "interrupted (default: [query] timeout_seconds)")] = None,
    config: ConfigOption = None,
) -> None:
    """Run read-only SQL against a pipeline's results database and print the result."""
    import duckdb

    from tasks.core.locks import LockTimeout, locked, recover_database, wal_path
    from tasks.core.sandbox import connect_sandboxed, write_csv, write_json

    cfg = read_config(config)
    if sql == "-":
        sql = sys.stdin.read()
    if timeout is not None and not 0 < timeout <= MAX_TIMEOUT_S:     # inf and 1e308 overflow the thread wait
        fail(f"--timeout {timeout:g}: give a number of seconds above 0 and at most {MAX_TIMEOUT_S:g}")
    if not 1 <= max_rows <= MAX_ROWS:
        fail(f"--max-rows {max_rows}: give a number of rows from 1 to {MAX_ROWS:,}")
    try:
        check_read_only(sql)
    except ValueError as error:
        fail(str(error))
    database, note = results_database(cfg, pipeline)
    if note:
        typer.echo(note, err=True)
    if wal_path(database).exists():   # left by a killed writer, or damaged: replay it, or move it aside
        try:
            with locked(database):    # GREBENCH_LOCK_TIMEOUT seconds at most
                recover_database(database)
        except LockTimeout as error:
            fail(str(error))
    limits = cfg.query
    seconds = timeout if timeout is not None else limits.timeout_seconds
    outcome: dict[str, BaseException | None] = {"error": None}
    finished = threading.Event()

    def work(con: duckdb.DuckDBPyConnection) -> None:
        name_os_thread(b"grebench-query")   # shows in top / ps -L while the SQL runs
        try:
            if format is Format.table:
                relation = con.sql(sql)
                if relation is not None:
                    relation.show(max_rows=max_rows, max_col_width=80)
            elif format is Format.csv:
                write_csv(con.execute(sql), sys.stdout)
            else:
                write_json(con.execute(sql), sys.stdout)
            sys.stdout.flush()
        except BaseException as error:  # noqa: BLE001 - handed to the main thread, which reports it
            outcome["error"] = error
        finally:
            finished.set()

    try:
        con = connect_sandboxed(database, memory_limit_mb=limits.memory_limit_mb,
                                max_spill_mb=limits.max_spill_mb, threads=limits.threads)
    except duckdb.Error as error:
        fail(f"{database}: cannot open the results database: {str(error).splitlines()[0]}")
    with address_space_cap((limits.memory_limit_mb + limits.address_space_headroom_mb) * 2**20):
        worker = threading.Thread(target=work, args=(con,), name="grebench-query", daemon=True)
        worker.start()
        try:
            if not finished.wait(seconds):
                con.interrupt()
                finished.wait(GRACE_SECONDS)
                typer.echo(f"error: the query ran longer than {seconds:g} s and was interrupted (--timeout, "
                           "or [query] timeout_seconds in pipelines.toml)", err=True)
                raise typer.Exit(EXIT_TIMEOUT)
        except KeyboardInterrupt as stopped:
            con.interrupt()
            finished.wait(GRACE_SECONDS)
            code = getattr(stopped, "code", EXIT_INTERRUPTED)
            typer.echo("error: interrupted" if code == EXIT_INTERRUPTED else f"error: {stopped}", err=True)
            raise typer.Exit(code) from None
    error = outcome["error"]
    with contextlib.suppress(duckdb.Error):
        con.close()
    if isinstance(error, BrokenPipeError):
        return
    if isinstance(error, duckdb.OutOfMemoryException):
        fail(f"{str(error).splitlines()[0]} (the query's limit is [query] memory_limit_mb = "
             f"{limits.memory_limit_mb} in pipelines.toml)")
    if isinstance(error, duckdb.Error):
        fail(str(error).splitlines()[0])
    if error is not None:
        raise error
