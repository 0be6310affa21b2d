"""Every metric in one registry (tasks/metrics/registry.py); one module per metric family.

    from tasks.metrics import REGISTRY, Resources, score_metrics, score_with_tables

Importing the package registers every family below.
"""

from tasks.metrics import bartscore, classic, fmi, gem, judge, oracle, oracle_cells, quality, reviseval  # noqa: F401
from tasks.metrics.registry import (
    NEEDS,
    REGISTRY,
    FamilyResult,
    Metric,
    MissingResource,
    Need,
    Resources,
    candidate_scores,
    check_names,
    get,
    higher_is_better,
    register,
    score_metrics,
    score_with_tables,
)

__all__ = ["NEEDS", "REGISTRY", "FamilyResult", "Metric", "MissingResource", "Need", "Resources", "candidate_scores",
           "check_names", "get", "higher_is_better", "register", "score_metrics", "score_with_tables"]
