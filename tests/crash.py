"""Crash a real process at a chosen moment: what the resume tests do to an ingest run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ingest_killed_when(arrived: Callable[[], bool], tmp_path: Path, url: str, ingest_settings: str) -> None:
    """Run `ingest_venue` of the demo venue from `url` into `tmp_path / "out"` in a child process
    (IngestConfig(page_size=5, <ingest_settings>)), and SIGKILL it once `arrived()` holds (within 60 s)."""
    script = (
        "import sys; from pathlib import Path; from tasks.core.config import Config, IngestConfig;"
        "from tasks.stages.ingest.fetch import ingest_venue;"
        f"cfg = Config(root=Path(sys.argv[1]), ingest=IngestConfig(page_size=5, {ingest_settings}));"
        "ingest_venue('GREBench.cc/2025/Demo', cfg, Path(sys.argv[1]) / 'out', sys.argv[2])"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path), url], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not arrived():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
