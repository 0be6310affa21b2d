"""Ctrl-C and SIGTERM end a stage within 10 s with exit 130 / 143 and one line, also while a worker
thread waits on a server that never answers; nothing half-written stays in the stage's folder."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tasks.testing.pipelines import ingest_pipeline

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def holding_server() -> Iterator[tuple[str, threading.Event]]:
    """(URL, an event set at the first connection) of a server that accepts and never answers."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    arrived, held = threading.Event(), []

    def accept() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            held.append(connection)
            arrived.set()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", arrived
    finally:
        listener.close()
        for connection in held:
            connection.close()


@pytest.mark.slow   # starts Prefect's server
@pytest.mark.parametrize(("number", "code", "line"), [(signal.SIGINT, 130, "error: interrupted (Ctrl-C)"),
                                                      (signal.SIGTERM, 143, "error: stopped (SIGTERM)")])
def test_a_signal_ends_a_stage_stuck_on_a_silent_server_within_10_s(project_config, tmp_path, number, code, line):
    with holding_server() as (url, arrived):
        config = project_config(ingest_pipeline("stuck", "ICLR.cc/2025/Conference", url, timeout_seconds=3600,
                                                request_total_seconds=3600))
        proc = subprocess.Popen([sys.executable, "-m", "flows.cli.main", "run", "stuck", "-c", str(config)],
                                cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_HOME": str(tmp_path / "prefect"),
                                     "OPENREVIEW_TOKEN": "tok-signals-test"})
        try:
            assert arrived.wait(240), "the stage never reached the server"
            time.sleep(0.5)
            proc.send_signal(number)
            sent = time.monotonic()
            out, err = proc.communicate(timeout=60)
            took = time.monotonic() - sent
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == code and took < 10, (proc.returncode, took, err[-2000:])
    assert line in err and "Traceback" not in err.split(line)[-1]
    data = tmp_path / "data"
    # nothing half-written: no scratch file, no stage output; the run record (written when the stage
    # started, so an interrupted run shows how far it got) is whole
    files = [p for p in data.rglob("*") if p.is_file()]
    assert not [p for p in files if ".tmp" in p.name or (p.suffix == ".parquet" and "runs" not in p.parts)]
    import polars as pl

    assert all(pl.read_parquet(p).height >= 1 for p in files if "runs" in p.parts and p.suffix == ".parquet")


def _catches_sigterm(pid: int) -> bool:
    """Whether the process has its own SIGTERM handler yet (the CLI installs it as its first import)."""
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("SigCgt:"):
            return bool(int(row.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return False


def _pipelines_command() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "flows.cli.main", "pipelines"], cwd=ROOT, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.parametrize(("number", "code", "line"), [(signal.SIGINT, 130, "error: interrupted (Ctrl-C)"),
                                                      (signal.SIGTERM, 143, "error: stopped (SIGTERM)")])
def test_a_signal_while_the_command_imports_is_one_line(number, code, line):
    proc = _pipelines_command()
    while not _catches_sigterm(proc.pid):   # its handlers are in; the imports (seconds) have just begun
        assert proc.poll() is None
        time.sleep(0.002)
    proc.send_signal(number)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code, (proc.returncode, err[-2000:])
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith(line), err[-2000:]


@pytest.mark.parametrize(("number", "code", "line"), [(signal.SIGINT, 130, "error: interrupted (Ctrl-C)"),
                                                      (signal.SIGTERM, 143, "error: stopped (SIGTERM)")])
def test_a_signal_at_any_moment_of_a_command_is_its_line_or_a_whole_run(number, code, line):
    """Importing, running (typer turns Ctrl-C into a silent exit 130), printing, shutting down: a signal
    anywhere ends the command with its code and one line, or arrives after a whole, clean run."""
    whole = _pipelines_command()
    out, err = whole.communicate(timeout=60)
    assert whole.returncode == 0 and not err
    started = time.monotonic()
    ran = _pipelines_command()
    ran.communicate(timeout=60)
    lifetime = time.monotonic() - started
    outcomes = set()
    for step in range(12):
        proc = _pipelines_command()   # (before its handlers are in, the interpreter's own defaults answer)
        while not _catches_sigterm(proc.pid) and proc.poll() is None:
            time.sleep(0.002)
        time.sleep(lifetime * step / 10)
        proc.send_signal(number)
        got, err = proc.communicate(timeout=30)
        if proc.returncode == 0:
            assert (got, err) == (out, ""), step
            outcomes.add("whole")
        else:
            assert proc.returncode == code, (step, proc.returncode, err[-2000:])
            assert "Traceback" not in err and err.count("\n") == 1 and err.startswith(line), (step, err[-2000:])
            outcomes.add("stopped")
    assert "stopped" in outcomes
