"""Every metric in one registry (tasks/metrics/registry.py); one module per metric family.

    from tasks.metrics import REGISTRY, Resources, score_metrics, score_with_tables

Importing the package registers every family below. Two computations of the families are also
used outside a metric, so they are offered here rather than reached for inside a family:
`binoculars_scores` (the reference flags of the score stage), `binoculars_calibrate` (a threshold at a
false-positive rate: `grebench calibrate binoculars`) and `parse_rating_answer` (a candidate's own
<rating> answer on the common scale: the injection track).
"""

from tasks.metrics import (  # noqa: F401
    bartscore,
    classic,
    fmi,
    gem,
    judge,
    oracle,
    oracle_cells,
    pairwise,
    quality,
    reviseval,
)
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
from tasks.metrics.review_quality.binoculars import calibrate as binoculars_calibrate
from tasks.metrics.review_quality.binoculars import reviews_scores as binoculars_scores
from tasks.metrics.review_quality.fields import parse_rating as parse_rating_answer

__all__ = ["NEEDS", "REGISTRY", "FamilyResult", "Metric", "MissingResource", "Need", "Resources", "binoculars_calibrate",
           "binoculars_scores",
           "candidate_scores", "check_names", "get", "higher_is_better", "parse_rating_answer", "register",
           "score_metrics", "score_with_tables"]
