"""The recipes: one flow per stage, the pipeline flow, and the CLI (flows/cli).

Importing any flow registers the offline demo's doubles with the layers below (base_url
"served:<model>", the "synthetic" venue source: tasks/testing/demo.py), so a run from the CLI, a
deployment or a test gets them; the stages themselves never import a test double. It also has
every log record of the process scrubbed of credentials (`tasks/stages/ingest/auth.py`).
"""

from tasks.stages.ingest.auth import scrub_log_records
from tasks.testing.demo import register_doubles

register_doubles()
scrub_log_records()   # no credential reaches a log line or Prefect's database
