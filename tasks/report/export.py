"""`grebench export`: what a submitter needs to review the benchmark's papers for a release.

    <out>/papers.jsonl             one paper a line: paper_id, venue_id, title, abstract, pdf_url,
                                   first_public_at, text (the PDF text the pipeline extracted, or
                                   null) and text_source (pdf_text | none)
    <out>/papers.csv               the same without the text, for a spreadsheet
    <out>/review_form.md           what a review must hold, the submission file's columns, the
                                   rating and confidence scales, the limits and the command to run
    <out>/submission_template.csv  paper_id,review,rating,confidence,model: one row per paper to fill in
    <out>/release.json             the release id and the parts it hashes (tasks/stages/validate/releases.py)

Only the benchmark sample is exported; the human reviews never are (they are the references).
"""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from tasks.core import damage
from tasks.core.config import Config
from tasks.core.layout import stage_dir
from tasks.stages.generate.submit import benchmark
from tasks.stages.validate.releases import release_of

SUBMISSION_COLUMNS = ("paper_id", "review", "rating", "confidence", "model")


def export_papers(cfg: Config, pipeline: str) -> pl.DataFrame:
    """The benchmark papers with their PDF text where the ingest stage extracted it."""
    papers = benchmark(cfg, pipeline)
    texts = []
    for venue in cfg.pipelines[pipeline].venues:
        path = stage_dir(cfg, pipeline, "ingest", venue) / "pdf_texts.parquet"
        if path.is_file():
            texts.append(damage.read_parquet(path, columns=["paper_id", "text"]))
    text = (pl.concat(texts).unique("paper_id", keep="first") if texts
            else pl.DataFrame(schema={"paper_id": pl.String, "text": pl.String}))
    columns = [c for c in ("paper_id", "venue_id", "title", "abstract", "pdf_url", "first_public_at")
               if c in papers.columns]
    return (papers.select(columns).join(text, on="paper_id", how="left")
            .with_columns(text_source=pl.when(pl.col("text").str.strip_chars().str.len_chars() > 0)
                          .then(pl.lit("pdf_text")).otherwise(pl.lit("none")))
            .sort("venue_id", "paper_id"))


def review_form(cfg: Config, pipeline: str, release_id: str, papers: pl.DataFrame) -> str:
    scale = ", ".join(f"{v:g}" for v in cfg.curate.common_scale)
    low, high = cfg.curate.confidence_range
    first = papers["first_public_at"].drop_nulls().min() if "first_public_at" in papers.columns else None
    earliest = first.strftime("%Y-%m-%d") if isinstance(first, datetime) else "unknown"
    return f"""# GRE-bench review form (pipeline {pipeline}, release {release_id})

Review each paper in `papers.jsonl` ({papers.height} papers) as a reviewer for a machine-learning
conference would, and return one review per paper in a Parquet, CSV or JSON Lines file.

## What a review holds

Markdown text with four parts, in this order:

    ## Summary
    The problem, the approach, and what the paper claims to have shown.

    ## Strengths
    1. A reason to accept the paper, with the evidence in the paper behind it.

    ## Weaknesses
    1. A reason to reject the paper, with the evidence behind it or the evidence that is missing.

    ## Questions
    The questions you would ask the authors.

Reviews are scored against the human reviews of the same paper, judgment by judgment: be specific.

## The file

| column | required | what |
|---|---|---|
| paper_id | yes | an id from papers.jsonl |
| review | yes | the review text (UTF-8, at most {cfg.generate.max_review_chars} characters) |
| rating | no | an overall rating, one of the common scale's values ({scale}) |
| confidence | no | the reviewer's confidence, {low:g} to {high:g} |
| model | no | your system's name, version and settings (free text) |

One row per paper; a paper left out is counted as missing, not as a failure. A row with an unknown
paper id, an empty or overlong review, a value of the wrong type, text that is not UTF-8, or a
second different review of the same paper is rejected with its reason (`rejects` table); every
row is accounted for. `submission_template.csv` has one row per paper to fill in.

## Contamination

Declare your system's training-data cutoff with `--cutoff`. A paper first public on or before it
(the earliest is {earliest}) is left out of your scores, as it is for every generated candidate.

## Submitting

    grebench submit --pipeline {pipeline} --reviews my_reviews.jsonl --name my-system --cutoff 2024-06-30

The reviews are preprocessed into judgments, scored by every configured metric and shown on the
leaderboard as "submitted". Submitting again under the same name needs `--replace`.
"""


def write_export(cfg: Config, pipeline: str, out: Path) -> dict[str, Any]:
    """Write the export into `out`; what was written."""
    papers = export_papers(cfg, pipeline)
    release = release_of(cfg, pipeline)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "papers.jsonl").open("w", encoding="utf-8") as handle:
        for row in papers.iter_rows(named=True):
            handle.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    papers.drop("text").write_csv(out / "papers.csv")
    with (out / "submission_template.csv").open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(SUBMISSION_COLUMNS)
        writer.writerows([pid, "", "", "", ""] for pid in papers["paper_id"].to_list())
    (out / "review_form.md").write_text(review_form(cfg, pipeline, release.release_id, papers), encoding="utf-8")
    manifest = {"release_id": release.release_id, "pipeline": pipeline, "exported_at": datetime.now(UTC).isoformat(),
                "venues": release.venues, "n_papers": papers.height, "with_text": int((papers["text_source"] ==
                                                                                      "pdf_text").sum()),
                "hashes": release.hashes, "metrics": release.metrics, "eval_lms": release.eval_lms,
                "note": "the release id changes when the papers, the references' judgments, the prompts, the "
                        "evaluation LMs or the metric settings do; the leaderboard row shows the one scored"}
    (out / "release.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return {"out": str(out), "papers": papers.height, "with_text": manifest["with_text"],
            "release_id": release.release_id,
            "files": ["papers.jsonl", "papers.csv", "review_form.md", "submission_template.csv", "release.json"]}
