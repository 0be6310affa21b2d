"""The Prefect server a `grebench` command starts dies with that command, however it ends.

Prefect runs its ephemeral API server as a child process (uvicorn) and stops it at exit, but a
`kill -9` of the CLI skips every exit handler and the server lives on (120-225 MB each). Here the
server is started through a small launcher instead, which watches its parent's pid once a second
and stops the server (SIGTERM, then exit) within about a second of the CLI's end. (The kernel's
parent-death signal, PR_SET_PDEATHSIG, is not used: it follows the thread that started the
child, and Prefect may start its server from a thread that ends long before the command.)

Two commands that share a Prefect home (two runs on one project at once) start their servers one
after the other: the launcher holds a lock in the Prefect home until its server answers, since each
server migrates the same SQLite database as it starts and two at once fail with a logged traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from types import SimpleNamespace
from typing import Any

# Run as `python -c LAUNCHER <parent pid> <uvicorn args...>`.
LAUNCHER = r"""
import os, signal, sys, threading, time
parent = int(sys.argv[1])
def watch():
    while os.getppid() == parent:
        time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(10)
    os._exit(1)
if os.getppid() != parent:
    sys.exit(1)
threading.Thread(target=watch, daemon=True).start()
def start_alone():
    # servers of commands that share a Prefect home start one at a time: each migrates the same SQLite
    # database at its start, and two at once fail ("index ... already exists", a logged traceback)
    import fcntl, urllib.request
    try:
        from prefect.settings import PREFECT_HOME
        home = PREFECT_HOME.value()
        home.mkdir(parents=True, exist_ok=True)
        held = open(home / "grebench-server-start.lock", "w")
        fcntl.flock(held, fcntl.LOCK_EX)
    except Exception:
        return
    args = sys.argv[2:]
    port = args[args.index("--port") + 1] if "--port" in args else None
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))   # never through a proxy
    def release_when_ready():
        deadline = time.monotonic() + 300
        while port and time.monotonic() < deadline:
            try:
                direct.open(f"http://127.0.0.1:{port}/api/health", timeout=1).read()
                break
            except Exception:
                time.sleep(0.1)
        held.close()
    threading.Thread(target=release_when_ready, daemon=True).start()
start_alone()
sys.argv = ["uvicorn", *sys.argv[2:]]
import runpy
runpy.run_module("uvicorn", run_name="__main__", alter_sys=True)
"""


def guard_ephemeral_server() -> None:
    """Make Prefect start its ephemeral server through the launcher (idempotent)."""
    from prefect.server.api import server

    if getattr(server.SubprocessASGIServer, "_grebench_guarded", False):
        return
    original = server.SubprocessASGIServer._run_uvicorn_command

    def run_guarded(self: Any) -> subprocess.Popen[Any]:
        def popen(args: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
            if list(args[:3]) == [sys.executable, "-m", "uvicorn"]:
                args = [sys.executable, "-c", LAUNCHER, str(os.getpid()), *args[3:]]
            return subprocess.Popen(args, **kwargs)

        server.subprocess = SimpleNamespace(Popen=popen)   # the server module's name only, for this call
        try:
            return original(self)
        finally:
            server.subprocess = subprocess

    server.SubprocessASGIServer._run_uvicorn_command = run_guarded
    server.SubprocessASGIServer._grebench_guarded = True


def prepare_flows() -> None:
    """What every command that starts flows does first: its Prefect server guarded (ends with the
    command, kill -9 included) and Prefect's logs of failures told in one line kept without traceback."""
    from flows.cli.failures import quiet_known_failures

    guard_ephemeral_server()
    quiet_known_failures()


@contextmanager
def ephemeral_server_starting() -> Iterator[None]:
    """Prefect's ephemeral server starting in a thread while the body runs. Prefect would start it at
    the first flow call and wait for it idle (3 s here, 7 s on a first run that creates its database);
    the body can load what the run needs meanwhile. Nothing where PREFECT_API_URL names a server or
    ephemeral mode is off. A server that fails to start fails at the first flow call, as before."""
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED

    if PREFECT_API_URL.value() or not PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        yield
        return
    from prefect.logging.configuration import ensure_logging_setup
    from prefect.server.api.server import SubprocessASGIServer

    ensure_logging_setup()   # so its "Starting temporary server on ..." line is shown, as at a flow call

    def start() -> None:
        with suppress(Exception):   # told by the first flow call, which starts it again
            SubprocessASGIServer().start()

    starting = threading.Thread(target=start, name="prefect-server-start", daemon=True)
    starting.start()
    try:
        yield
    finally:
        starting.join()
