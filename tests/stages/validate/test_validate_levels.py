"""Validation levels: deterministic strategies on the judgment lines, on the raw review (then preprocessed), or both."""

from __future__ import annotations

import polars as pl
import pytest

from tasks.core import schema
from tasks.core.config import ValidateConfig
from tasks.core.review_text import is_header, split_sentences
from tasks.metrics import REGISTRY, FamilyResult, Metric, Resources, register
from tasks.metrics.registry import NOTHING, reference_sets
from tasks.stages.validate.workflow import run_validation
from tests.stages.validate.test_validate_workflow import make_reviews

CALLS: list[int] = []


def rule_preprocessor(reviews: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A rule-based stand-in for the LLM preprocessor: one judgment line per sentence, headers skipped."""
    CALLS.append(reviews.height)
    rows = []
    for row in reviews.iter_rows(named=True):
        sentences = [s for s, _ in split_sentences(row["review_text"]) if s.strip() and not is_header(s)]
        rows += [{"review_id": row["review_id"], "position": k, "text": f"The reviewer writes: {s}"}
                 for k, s in enumerate(sentences)]
    rejects = schema.empty(schema.REJECTS)
    return pl.DataFrame(rows, schema={"review_id": pl.String, "position": pl.Int64, "text": pl.String}), rejects


@pytest.fixture
def line_count():
    """A judgment metric for this test only: the number of judgment lines (higher is better)."""

    def family(metrics, candidates, references, negatives, synopses, resources):
        rows = []
        for cand, refs in reference_sets(candidates, references):
            value = float(len([x for x in (cand["judgments"] or "").splitlines() if x.strip()]))
            rows += [{"paper_id": cand["paper_id"], "candidate": cand["candidate"], "source": cand["source"],
                      "reference": ref["review_id"], "metric": "toy_lines", "score": value} for ref in refs]
        return FamilyResult(pl.DataFrame(rows))

    register(Metric("toy_lines", "judgments", "none", NOTHING, True, "test only", family))
    yield "toy_lines"
    REGISTRY.pop("toy_lines")


def _run(levels, metric):
    CALLS.clear()
    return run_validation(make_reviews(n_papers=4, lines=4), ValidateConfig(strategies=["sentence_deletion", "format_headers"], metrics=[metric, "bleu"], level=levels, bootstrap_resamples=0, min_pairs=2), resources=Resources(), preprocess=rule_preprocessor)


def test_judgment_level_needs_no_preprocessing(line_count):
    result = _run(("judgments",), line_count)
    assert CALLS == []
    rows = result.validation.select("metric", "strategy", "level").rows()
    # one level for the whole table: bleu, which reads the raw review, reads the perturbed judgment lines
    assert rows == [("toy_lines", "sentence_deletion", "judgments"), ("toy_lines", "format_headers", "judgments"),
                    ("bleu", "sentence_deletion", "judgments"), ("bleu", "format_headers", "judgments")]
    deletion = result.validation.row(0, named=True)
    assert deletion["mean_change"] == -2.0        # four lines -> lines 1 and 3


def test_raw_level_preprocesses_the_perturbed_review(line_count):
    result = _run(("raw",), line_count)
    # the 4 original candidates, then 4 candidates x 2 strategies: original and perturbed by one preprocessor
    assert CALLS == [4, 8]
    assert set(result.validation["level"]) == {"raw"} and result.validation.height == 4
    headers = result.validation.filter(metric="toy_lines", strategy="format_headers").row(0, named=True)
    assert headers["n"] == 4
    assert result.perturbations["judgments"].str.starts_with("The reviewer writes:").all()


def test_both_levels_in_one_run(line_count):
    result = _run(("raw", "judgments"), line_count)
    rows = result.validation.select("metric", "strategy", "level").rows()
    assert rows == [("toy_lines", "sentence_deletion", "judgments"), ("toy_lines", "sentence_deletion", "raw"),
                    ("toy_lines", "format_headers", "judgments"), ("toy_lines", "format_headers", "raw"),
                    ("bleu", "sentence_deletion", "raw"), ("bleu", "format_headers", "raw")]
    assert result.perturbations.height == 16 and CALLS == [8]
    assert result.pairs.filter(metric="bleu").height == 8  # the raw reruns are not tested twice for bleu
    with pytest.raises(ValueError, match="'raw' or 'judgments'"):   # the config refuses an unknown level
        ValidateConfig(strategies=["sentence_deletion"], metrics=["bleu"], level=("tokens",))


@pytest.mark.parametrize("judgments", ["preprocess", "given"])
def test_both_sides_are_lines_of_one_preprocessor_unless_the_given_lines_are_asked_for(judgments):
    """`judgments = "preprocess"`: the references' lines are made again by the preprocessor that makes the
    candidates', so GEM never compares two preprocessors' styles; "given" keeps the file's lines (the proxy)."""
    seen: dict[str, set[str]] = {"candidate": set(), "reference": set()}

    def family(metrics, candidates, references, negatives, synopses, resources):
        rows = []
        for cand, refs in reference_sets(candidates, references):
            if cand["source"] != "human":   # (the human rows are the references scored against each other)
                seen["candidate"].update((cand["judgments"] or "").splitlines())
                for ref in refs:
                    seen["reference"].update((ref["judgments"] or "").splitlines())
            rows += [{"paper_id": cand["paper_id"], "candidate": cand["candidate"], "source": cand["source"],
                      "reference": ref["review_id"], "metric": "toy_sides", "score": 1.0} for ref in refs]
        return FamilyResult(pl.DataFrame(rows))

    register(Metric("toy_sides", "judgments", "none", NOTHING, True, "test only", family))
    try:
        run_validation(make_reviews(n_papers=4, lines=4),
                       ValidateConfig(strategies=["sentence_deletion"], metrics=["toy_sides"], level=("raw",),
                                      judgments=judgments, bootstrap_resamples=0, min_pairs=2),
                       resources=Resources(), preprocess=rule_preprocessor)
    finally:
        REGISTRY.pop("toy_sides")
    made = {side: {line.startswith("The reviewer writes: ") for line in lines} for side, lines in seen.items()}
    assert made["candidate"] == {True}   # raw level: the candidate's lines, original and perturbed, made by one LLM
    assert made["reference"] == ({True} if judgments == "preprocess" else {False})


def test_a_strategy_without_a_usable_perturbation_keeps_its_row_and_says_why(line_count):
    """One paper: random replacement finds no review of another paper, so none of its perturbations is
    usable; its row stays, with no number, "inconclusive", and its reason counts the unusable perturbations."""
    result = run_validation(make_reviews(n_papers=1, lines=4),
                            ValidateConfig(strategies=["sentence_deletion", "random_replacement"], metrics=[line_count],
                                           level=("judgments",), bootstrap_resamples=0, min_pairs=2),
                            resources=Resources(), preprocess=rule_preprocessor)
    rows = {r["strategy"]: r for r in result.validation.iter_rows(named=True)}
    assert set(rows) == {"sentence_deletion", "random_replacement"}
    empty = rows["random_replacement"]
    assert (empty["n"], empty["verdict"]) == (0, "inconclusive") and empty["smd"] != empty["smd"]   # NaN
    assert empty["reason"] == ("only 0 complete pair(s); need at least 2; 1 of 1 perturbations unusable (no review "
                               "of another paper in the group: 1)")
    assert rows["sentence_deletion"]["n"] == 1 and "unusable" not in (rows["sentence_deletion"]["reason"] or "")
