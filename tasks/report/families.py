"""The families the leaderboard page groups its boards by, in the order a reader meets them.

A metric's family is the module of the registry that scores it (tasks/metrics: its family function's
module), so a new metric lands in its family without a list to keep: GEM's family first, then the classic
baselines (and RevisEval's, which revise before they compare), the f-MI cells, the LLM judges, and review
quality; a metric of a module named nowhere here comes last, under "Other metrics".
"""

from __future__ import annotations

import re

FAMILIES = (
    ("GEM and GEM-S", ("tasks.metrics.gem",)),
    ("Classic baselines", ("tasks.metrics.classic", "tasks.metrics.bartscore", "tasks.metrics.reviseval")),
    ("f-MI cells", ("tasks.metrics.fmi", "tasks.metrics.oracle_cells")),
    ("LLM judges", ("tasks.metrics.judge", "tasks.metrics.pairwise")),
    ("Review quality", ("tasks.metrics.quality", "tasks.metrics.review_quality")),
)
OTHER = "Other metrics"


def family_of(metric: str) -> str:
    """The family of a metric of the registry (OTHER for a name it does not hold)."""
    from tasks.metrics.registry import REGISTRY

    entry = REGISTRY.get(metric)
    module = getattr(entry.fn, "__module__", "") if entry is not None else ""
    for name, modules in FAMILIES:
        if any(module == m or module.startswith(f"{m}.") for m in modules):
            return name
    return OTHER


def order() -> list[str]:
    """Every family's name in page order."""
    return [name for name, _ in FAMILIES] + [OTHER]


def family_slug(name: str) -> str:
    """The page anchor of a family: "GEM and GEM-S" -> "family-gem-and-gem-s"."""
    return "family-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
