"""Which reviews the validate stage tests the metrics on, and where they come from.

`[validate] reviews` names them: "curated" (the pipeline's curated reviews of its benchmark papers), a
sample shipped in `samples/<name>/` beside this module (its review file, its LICENSE, a README and a
`provenance.toml` naming the source, the license and which rows of the source it holds), or the path of
a review file, read through the same reader as `grebench validate --reviews`
(tasks/stages/validate/reviews_file.py). `validation_data` is the one-row provenance the results
database and the site's validation page show beside the verdicts, and the closing line of a run reads.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from tasks.core.config import Config

SAMPLES = Path(__file__).resolve().parent / "samples"
CURATED = "curated"
VALIDATION_DATA = pl.Schema({
    "data": pl.String,            # "curated", a shipped sample's name or the review file's name
    "label": pl.String,           # what the data is, in words (the closing line's words)
    "source": pl.String,          # where the reviews come from
    "source_url": pl.String,      # NULL: no public address (the note says why)
    "license": pl.String,         # NULL: not recorded (the note says why)
    "release_rows": pl.String,    # which rows of the source: NULL for the pipeline's own reviews
    "judgments_by": pl.String,    # who wrote the judgment lines the judgments level reads
    "path": pl.String,            # the file read (NULL: the pipeline's curated reviews)
    "papers": pl.Int64,           # papers in the data
    "reviews": pl.Int64,          # reviews in the data
    "papers_validated": pl.Int64,  # papers drawn into validation ([validate] max_papers, seed)
    "candidates": pl.String,      # [validate] candidates: "one" per paper or "all"
    "levels": pl.String,          # [validate] level, comma-separated
    "note": pl.String,
})


@dataclass(frozen=True)
class ReviewData:
    """The reviews (REVIEWS_IN-like rows) and their provenance row (VALIDATION_DATA, before the sample)."""

    reviews: pl.DataFrame
    provenance: dict[str, object]


def shipped_samples() -> list[str]:
    """The names of the samples shipped with the code (folders with a provenance.toml)."""
    return sorted(p.parent.name for p in SAMPLES.glob("*/provenance.toml"))


def sample_provenance(name: str) -> dict[str, object]:
    """A shipped sample's provenance.toml (name, label, source, source_url, license, release_rows,
    judgments_by, file)."""
    with (SAMPLES / name / "provenance.toml").open("rb") as handle:
        return tomllib.load(handle)


def sample_file(name: str) -> Path | None:
    """The review file of the shipped sample `name`, None when no sample has that name."""
    return SAMPLES / name / str(sample_provenance(name)["file"]) if name in shipped_samples() else None


def review_file(cfg: Config) -> Path | None:
    """The file `[validate] reviews` names (None: the pipeline's curated reviews); a ValueError in one
    line when it names neither a shipped sample nor a file that exists."""
    name = cfg.validate.reviews
    if name == CURATED:
        return None
    shipped = sample_file(name)
    if shipped is not None:
        return shipped
    path = Path(name) if Path(name).is_absolute() else cfg.root / name
    if not path.is_file():
        raise ValueError(f"{name!r} is neither {CURATED!r}, a shipped sample ({', '.join(shipped_samples())}) "
                         f"nor a review file ({path} not found)")
    return path


def load_review_data(cfg: Config) -> ReviewData | None:
    """The reviews `[validate] reviews` names, read as `grebench validate --reviews` reads a file, with
    their provenance; None for the pipeline's curated reviews (the stage reads those itself)."""
    from tasks.stages.validate.reviews_file import load_reviews_file

    path = review_file(cfg)
    if path is None:
        return None
    reviews = load_reviews_file(path)
    name = cfg.validate.reviews
    if name in shipped_samples():
        known = sample_provenance(name)
        row = {k: known.get(k) for k in ("label", "source", "source_url", "license", "release_rows", "judgments_by")}
        row |= {"data": name, "path": str(path.relative_to(SAMPLES.parents[3])), "note": known.get("note")}
    else:
        lines = "judgments" in reviews.columns
        row = {"data": path.name, "label": f"the reviews of {path.name}", "source": str(path), "source_url": None,
               "license": None, "release_rows": None, "path": str(path),
               "judgments_by": "the file" if lines else "the [preprocess] LLM",
               "note": "a review file of the user's: its source, license and rows are not recorded"}
    row |= {"papers": reviews["paper_id"].n_unique(), "reviews": reviews.height}
    return ReviewData(reviews, row)


def curated_provenance(cfg: Config, pipeline: str, reviews: pl.DataFrame) -> dict[str, object]:
    """The provenance row of the pipeline's own curated reviews."""
    venues = ", ".join(cfg.pipelines[pipeline].venues) if pipeline in cfg.pipelines else ""
    return {"data": CURATED, "label": f"the curated reviews of {venues}", "source": venues, "source_url": None,
            "license": None, "release_rows": None, "judgments_by": "the [preprocess] LLM", "path": None,
            "papers": reviews["paper_id"].n_unique(), "reviews": reviews.height,
            "note": "the pipeline's own reviews: the source's license and address are the venue's"}


def validation_data(provenance: dict[str, object], cfg: Config, papers_validated: int) -> pl.DataFrame:
    """The provenance row with what validation drew from the data."""
    v = cfg.validate
    row = {**provenance, "papers_validated": papers_validated, "candidates": v.candidates,
           "levels": ", ".join(v.level)}
    return pl.DataFrame([{k: row.get(k) for k in VALIDATION_DATA.names()}], schema=VALIDATION_DATA)
