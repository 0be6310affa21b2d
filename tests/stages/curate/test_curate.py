"""Curation rules, rating mapping, seeded sample and the curation report on hand-built ingest frames."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest

from tasks.core.config import Config, CurateConfig, VenueConfig
from tasks.core.schema import (
    CURATED_PAPERS,
    CURATED_REVIEWS,
    CURATION_REPORT,
    PAPERS,
    REJECTS,
    REVIEWS,
    conform,
)
from tasks.stages.curate.rules import curate_frames, curate_venue, rating_lookup
from tasks.stages.curate.steps import curate_venue_task

VENUE = "Test.cc/2025/Conference"
# A 1-10 form merged onto {1, 3, 5, 6, 8, 10} (the NeurIPS-style map of pipelines.toml).
TEN_POINT = {"1": 1, "2": 1, "3": 3, "4": 5, "5": 5, "6": 6, "7": 8, "8": 8, "9": 10, "10": 10}
OUTPUTS = ("papers", "reviews", "rejects", "curation_report", "version_coverage")


def config(rating_map: dict | None = TEN_POINT, **curate) -> Config:
    return Config(venues={VENUE: VenueConfig(rating_map=rating_map)}, curate=CurateConfig(**curate))


def ingest(spec: dict[str, tuple[str | None, list[tuple]]]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """papers, reviews frames from {paper_id: (status, [(rating, confidence[, text]), ...])}."""
    papers, reviews = [], []
    for paper_id, (status, scores) in spec.items():
        papers.append({"paper_id": paper_id, "venue_id": VENUE, "status": status, "title": f"Title {paper_id}"})
        for i, score in enumerate(scores):
            rating, confidence, text = (*score, f"Review {i} of {paper_id}: a careful reading.")[:3]
            reviews.append({"review_id": f"{paper_id}-r{i}", "paper_id": paper_id, "venue_id": VENUE,
                            "rating": rating, "rating_raw": None if rating is None else f"{rating}: words",
                            "confidence": confidence, "review_text": text})
    return conform(pl.DataFrame(papers), PAPERS), conform(pl.DataFrame(reviews), REVIEWS)


SPEC = {
    "k3": ("active", [(6, 4), (7, 5), (8, 4)]),                       # 3 reviews: kept
    "k5": ("active", [(5, 4), (6, 4), (6, 5), (7, 4), (8.0, 5)]),      # 5 reviews: kept
    "var15": ("active", [(4, 4), (5, 4), (6, 5), (7, 5)]),            # -> 5, 5, 6, 8: variance 1.5 exactly
    "varhigh": ("active", [(2, 4), (5, 4), (8, 5), (9, 5)]),          # -> 1, 5, 8, 10
    "few": ("active", [(6, 4), (6, 5), (6, 3), (6, 2)]),              # 2 confident reviews
    "many": ("active", [(6, 4)] * 6),
    "gone": ("withdrawn", [(6, 4)] * 3),
    "desk": ("desk_rejected", []),
    "odd": (None, [(6, 4)] * 3),
    "scale": ("active", [(6, 4), (7, 4), (8, 5), (7.5, 5), (11, 4)]),
    "broken": ("active", [(6, 4), (6, 5), (6, 4), (None, 5), (6, None), (6, 7), (6, 4, "   ")]),
}
EXPECTED_PAPER_RULES = {"varhigh": "rating_variance", "few": "too_few_reviews", "many": "too_many_reviews",
                        "gone": "withdrawn", "desk": "desk_rejected", "odd": "unknown_status"}


def frames_with_extras() -> tuple[pl.DataFrame, pl.DataFrame]:
    papers, reviews = ingest(SPEC)
    orphan = reviews.head(1).with_columns(review_id=pl.lit("orphan-r0"), paper_id=pl.lit("nowhere"))
    return papers, pl.concat([reviews, orphan, reviews.filter(pl.col("review_id") == "k3-r0")])


def test_every_rule_drops_what_it_should() -> None:
    papers, reviews, rejects, report = curate_frames(*frames_with_extras(), VENUE, config())
    assert papers.schema == CURATED_PAPERS and reviews.schema == CURATED_REVIEWS
    assert rejects.schema == REJECTS and report.schema == CURATION_REPORT
    assert papers["paper_id"].to_list() == ["broken", "k3", "k5", "scale", "var15"]
    paper_rules = dict(rejects.filter(pl.col("entity") == "paper").select("entity_id", "rule").iter_rows())
    assert paper_rules == EXPECTED_PAPER_RULES
    own = rejects.filter((pl.col("entity") == "review") & (pl.col("rule") != "paper_dropped"))
    review_rules = dict(own.select("entity_id", "rule").iter_rows())
    assert {k: v for k, v in review_rules.items() if k.startswith(("scale", "broken", "few", "orphan"))} == {
        "scale-r3": "rating_not_in_scale", "scale-r4": "rating_not_in_scale",
        "broken-r3": "missing_rating", "broken-r4": "missing_confidence", "broken-r5": "confidence_out_of_range",
        "broken-r6": "empty_review", "few-r2": "low_confidence", "few-r3": "low_confidence",
        "orphan-r0": "orphan_review",
    }
    assert rejects.filter(pl.col("rule") == "duplicate_review")["entity_id"].to_list() == ["k3-r0"]
    for paper_id, rule in (("gone", "withdrawn"), ("varhigh", "rating_variance"), ("many", "too_many_reviews"),
                           ("few", "too_few_reviews"), ("odd", "unknown_status")):
        dropped = rejects.filter((pl.col("rule") == "paper_dropped") & (pl.col("paper_id") == paper_id))
        assert dropped.height == (2 if paper_id == "few" else len(SPEC[paper_id][1]))
        assert set(dropped["detail"]) == {f"paper {rule}"}
    details = dict(rejects.select("entity_id", "detail").iter_rows())
    assert details["scale-r3"].startswith("7.5") and details["scale-r4"].startswith("11")
    assert details["varhigh"] == "variance 11.5 > 1.5" and details["few-r3"].startswith("2")
    assert set(rejects["stage"]) == {"curate"} and rejects["detail"].is_not_null().all()


def test_ratings_are_mapped_and_statistics_computed() -> None:
    papers, reviews, _, _ = curate_frames(*ingest(SPEC), VENUE, config())
    k5 = reviews.filter(pl.col("paper_id") == "k5")
    assert k5["rating_venue"].to_list() == [5, 6, 6, 7, 8] and k5["rating"].to_list() == [5, 6, 6, 8, 8]
    stats = papers.filter(pl.col("paper_id") == "var15").row(0, named=True)
    assert (stats["n_reviews"], stats["rating_mean"], stats["rating_var"]) == (4, 6.0, 1.5)
    assert set(reviews["rating"]) <= {1, 3, 5, 6, 8, 10}


def test_boundaries_and_ddof() -> None:
    spec = {"n2": ("active", [(6, 4)] * 2), "n3": ("active", [(6, 4)] * 3), "n5": ("active", [(6, 4)] * 5),
            "n6": ("active", [(6, 4)] * 6), "v15": SPEC["var15"], "c4": ("active", [(6, 4.0), (6, 3.99), (6, 4), (6, 5)])}
    papers, _, rejects, _ = curate_frames(*ingest(spec), VENUE, config())
    assert papers["paper_id"].to_list() == ["c4", "n3", "n5", "v15"]
    assert rejects.filter(pl.col("rule") == "low_confidence")["entity_id"].to_list() == ["c4-r1"]
    papers, _, rejects, _ = curate_frames(*ingest(spec), VENUE, config(variance_ddof=1))
    assert "v15" not in papers["paper_id"].to_list()   # sample variance of 5, 5, 6, 8 is 2
    papers, _, _, _ = curate_frames(*ingest(spec), VENUE, config(min_reviews=2, max_reviews=6))
    assert papers.height == 6


def test_identity_map_without_venue_entry_and_bad_maps() -> None:
    spec = {"p": ("active", [(8, 4), (6, 4), (7, 4), (6, 5), (6, 4)])}
    _, reviews, rejects, _ = curate_frames(*ingest(spec), VENUE, config(rating_map=None))
    assert reviews["rating"].to_list() == [8, 6, 6, 6] and rejects["entity_id"].to_list() == ["p-r2"]
    assert rating_lookup(config({"7.0": 8, "6": 6}), VENUE) == {7.0: 8.0, 6.0: 6.0}
    with pytest.raises(ValueError, match="rating_map\n.*'seven' must be a number"):   # now found when loading
        config({"seven": 8})
    with pytest.raises(ValueError, match="rating_map: '7' maps to 7, which is not on curate.common_scale"):
        config({"7": 7})


def test_report_reconciles() -> None:
    ingested_papers, ingested_reviews = frames_with_extras()
    papers, reviews, rejects, report = curate_frames(ingested_papers, ingested_reviews, VENUE, config())
    assert report["step"].to_list() == list(range(1, report.height + 1))
    for entity, ingested, kept in (("paper", ingested_papers.height, papers.height),
                                   ("review", ingested_reviews.height, reviews.height)):
        chain = report.filter(pl.col("entity") == entity)
        assert chain["rows_in"][0] == ingested and chain["rows_out"][-1] == kept
        assert chain["rows_in"][1:].to_list() == chain["rows_out"][:-1].to_list()
        dropped = rejects.filter(pl.col("entity") == entity)
        assert ingested == kept + dropped.height
        per_rule = dropped.group_by("rule").len()
        expected = chain.group_by("rule").agg((pl.col("rows_in") - pl.col("rows_out")).sum().alias("len"))
        assert per_rule.join(expected, on="rule", how="full").filter(
            pl.col("len").fill_null(0) != pl.col("len_right").fill_null(0)
        ).is_empty()


def many_papers(n: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    return ingest({f"paper{i:03d}": ("active", [(6, 4), (7, 5), (6, 4)]) for i in range(n)})


def test_seeded_sample_is_deterministic_and_order_independent() -> None:
    papers, reviews = many_papers(60)
    cfg = config(sample_size=10, seed=7)

    def sample(p: pl.DataFrame, r: pl.DataFrame, c: Config = cfg) -> list[str]:
        out = curate_frames(p, r, VENUE, c)[0]
        return out.filter("in_benchmark")["paper_id"].to_list()

    first = sample(papers, reviews)
    assert len(first) == 10 and first == sample(papers, reviews)
    assert first == sample(papers.sample(fraction=1, shuffle=True, seed=1), reviews.reverse())
    assert first != sample(papers, reviews, config(sample_size=10, seed=8))
    grown = ingest({f"paper{i:03d}": ("active", [(6, 4), (7, 5), (6, 4)]) for i in range(60, 120)})
    bigger = sample(pl.concat([papers, grown[0]]), pl.concat([reviews, grown[1]]), config(sample_size=120, seed=7))
    assert len(bigger) == 120
    assert len(sample(papers, reviews, config(sample_size=500))) == 60


def test_curate_venue_writes_validated_files_idempotently(tmp_path: Path) -> None:
    ingest_dir, out_dir = tmp_path / "ingest", tmp_path / "curate"
    ingest_dir.mkdir()
    papers, reviews = frames_with_extras()
    papers.write_parquet(ingest_dir / "papers.parquet")
    reviews.write_parquet(ingest_dir / "reviews.parquet")
    result = curate_venue_task.fn(ingest_dir, VENUE, config(sample_size=3), out_dir)
    assert (result.papers_in, result.papers_kept, result.reviews_in, result.sampled) == (11, 5, reviews.height, 3)
    first = {name: (out_dir / f"{name}.parquet").read_bytes() for name in OUTPUTS}
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(f"{n}.parquet" for n in OUTPUTS)

    rng = random.Random(3)
    shuffled = reviews.sample(fraction=1, shuffle=True, seed=rng.randint(0, 99))
    papers.reverse().write_parquet(ingest_dir / "papers.parquet")
    shuffled.write_parquet(ingest_dir / "reviews.parquet")
    again = curate_venue(ingest_dir, VENUE, config(sample_size=3), out_dir)
    assert again == result
    assert {name: (out_dir / f"{name}.parquet").read_bytes() for name in OUTPUTS} == first


def test_unexpected_input_columns_are_an_error() -> None:
    papers, reviews = ingest(SPEC)
    with pytest.raises(ValueError, match="unexpected columns"):
        curate_frames(papers.with_columns(reviewer=pl.lit("x")), reviews, VENUE, config())
