"""Child processes for work whose imports a long run should not keep.

A Python process never gives back the memory of a module it imported. Two stages import large libraries
for a moment: the PDF readers (pymupdf, about 3 s to import) and the curated tables' checks
(great-expectations: about 2,000 modules and 0.24 GB resident for the rest of the run, under every later
stage's peak). Both run in children forked from one server process (multiprocessing's "forkserver": safe in a
threaded parent, unlike a plain fork) that imports those libraries once when it starts, so each child
starts at once with them loaded and the parent never imports them.
"""

from __future__ import annotations

from multiprocessing import get_context
from multiprocessing.context import BaseContext

# imported by the server once, before it forks any child (an import that fails there is left to the child)
PRELOAD = ["tasks.stages.ingest.pdf", "great_expectations"]


def child_context() -> BaseContext:
    """The multiprocessing context the project's children are started from (see the module's note)."""
    context = get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context
