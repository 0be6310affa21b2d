"""A venue's review form as config: its own field names mapped onto review columns (ICML-style)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tasks.core.config import VenueConfig
from tasks.stages.ingest.forms import normalise_review

VENUE = "ICML.cc/2025/Conference"
ICML_FORM = {"overall_recommendation": "rating", "summary": "summary", "claims_and_evidence": "weaknesses",
             "other_strengths_and_weaknesses": "strengths_and_weaknesses", "ethical_review_flag": "ignore"}


def icml_review(**extra) -> dict:
    content = {"summary": {"value": "The paper studies sparse attention."},
               "claims_and_evidence": {"value": "The main claim lacks an ablation."},
               "other_strengths_and_weaknesses": {"value": "Clear writing; limited baselines."},
               "overall_recommendation": {"value": 4}, "confidence": {"value": 3},
               "ethical_review_flag": {"value": "No ethics review needed at all here."}, **extra}
    return {"id": "r1", "forum": "p1", "cdate": 1, "content": content}


def test_an_icml_form_maps_through_config():
    row, problem = normalise_review(icml_review(), VENUE, VenueConfig(form=ICML_FORM).form)
    assert problem is None
    assert row["rating"] == 4 and row["confidence"] == 3
    assert row["weaknesses"] == "The main claim lacks an ablation."
    assert row["strengths_and_weaknesses"] == "Clear writing; limited baselines."
    assert "ethics" not in row["review_text"] and "## Weaknesses" in row["review_text"]


def test_without_the_mapping_the_rating_is_missing():
    row, problem = normalise_review(icml_review(), VENUE)
    assert row is None and problem[0] == "missing_rating"


def test_the_mapped_field_wins_over_a_built_in_alias():
    row, _ = normalise_review(icml_review(rating={"value": "9: legacy"}), VENUE, {"overall_recommendation": "rating"})
    assert row["rating"] == 4
    reverse = icml_review()
    reverse["content"] = {"overall_recommendation": {"value": 4}, **reverse["content"], "rating": {"value": 9}}
    assert normalise_review(reverse, VENUE, {"overall_recommendation": "rating"})[0]["rating"] == 4


def test_an_unknown_column_is_a_config_error():
    with pytest.raises(ValidationError, match="overall_recommendation = 'score': not a review column"):
        VenueConfig(form={"overall_recommendation": "score"})
