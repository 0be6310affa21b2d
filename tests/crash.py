"""Crash a real process at a chosen moment: what the resume tests do to a run (SIGKILL, no clean-up,
as a lost worker or a power cut leaves it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def killed_when(script: str, args: list[str], arrived: Callable[[], bool], timeout: float = 60) -> None:
    """Run `python -c script *args` from the repository and SIGKILL it once `arrived()` holds; fails
    when the child ends first or nothing arrives within `timeout` seconds."""
    proc = subprocess.Popen([sys.executable, "-c", script, *args], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while not arrived():
            assert proc.poll() is None, "the run ended before the moment it was to be killed at"
            assert time.monotonic() < deadline, f"nothing arrived within {timeout} s"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def ingest_killed_when(arrived: Callable[[], bool], tmp_path: Path, url: str, ingest_settings: str) -> None:
    """`ingest_venue` of the demo venue from `url` into `tmp_path / "out"` (IngestConfig(page_size=5,
    <ingest_settings>)), killed once `arrived()` holds."""
    script = (
        "import sys; from pathlib import Path; from tasks.core.config import Config, IngestConfig;"
        "from tasks.stages.ingest.fetch import ingest_venue;"
        f"cfg = Config(root=Path(sys.argv[1]), ingest=IngestConfig(page_size=5, {ingest_settings}));"
        "ingest_venue('GREBench.cc/2025/Demo', cfg, Path(sys.argv[1]) / 'out', sys.argv[2])"
    )
    killed_when(script, [str(tmp_path), url], arrived)
