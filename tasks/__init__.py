"""GRE-bench's building blocks: core, lm, metrics, scoring, stages, report, testing.

The first import of the project sets the C allocator to keep the memory torch frees
(tasks/core/allocator.py): it has to happen before any thread allocates.
"""

from tasks.core.allocator import keep_freed_memory

keep_freed_memory()
