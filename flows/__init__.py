"""The recipes: one flow per stage, the pipeline flow, and the CLI (flows/cli).

Importing any flow registers the offline demo's doubles with the layers below (base_url
"served:<model>", the "synthetic" venue source: tasks/testing/demo.py), so a run from the CLI, a
deployment or a test gets them; the stages themselves never import a test double.
"""

from tasks.testing.demo import register_doubles

register_doubles()
