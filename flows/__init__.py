"""The recipes: one flow per stage, the pipeline flow, and the CLI (flows/cli).

Importing any flow registers the offline demo's doubles with the layers below (base_url
"served:<model>", the "synthetic" venue source: tasks/testing/demo.py), so a run from the CLI, a
deployment or a test gets them; the stages themselves never import a test double. It also has
every log record of the process scrubbed of credentials (`tasks/stages/ingest/auth.py`).
"""

import os
import signal
import sys


def _stopped_while_starting(number: int, frame: object) -> None:
    """Ctrl-C or SIGTERM while a `grebench` command is still importing: nothing is written yet, so the
    command ends at once with its one line (flows/cli/interrupts.py takes over once `main` runs)."""
    code, what = (130, "interrupted (Ctrl-C)") if number == signal.SIGINT else (143, "stopped (SIGTERM)")
    os.write(2, f"error: {what} while starting; nothing was written\n".encode())
    os._exit(code)


# Only in a `grebench` process (the console script, or `python -m flows.cli.main`): a library import of
# the flows (a test, a deployment) keeps its own signal handling.
if os.path.basename(sys.argv[0] if sys.argv else "") == "grebench" or "flows.cli.main" in sys.orig_argv[1:3]:
    for _number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(_number, _stopped_while_starting)

from tasks.stages.ingest.auth import scrub_log_records  # noqa: E402 - after the handlers: imports take seconds
from tasks.testing.demo import register_doubles  # noqa: E402

register_doubles()
scrub_log_records()   # no credential reaches a log line or Prefect's database
