"""Every metric in one registry (tasks/metrics/registry.py); one module per metric family.

    from tasks.metrics import REGISTRY, Resources, score_metrics

Importing the package registers every family below.
"""

from tasks.metrics import bartscore, classic, fmi, gem, judge, oracle, oracle_cells, quality, reviseval  # noqa: F401
from tasks.metrics.registry import (
    REGISTRY,
    Metric,
    MissingResource,
    Resources,
    candidate_scores,
    check_names,
    get,
    higher_is_better,
    register,
    score_metrics,
)

__all__ = ["REGISTRY", "Metric", "MissingResource", "Resources", "candidate_scores", "check_names", "get",
           "higher_is_better", "register", "score_metrics"]
