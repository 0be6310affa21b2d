"""Speed of the curate stage (12,000 papers / 48,000 reviews) and of PDF text extraction.

    .venv/bin/python bench/ingest/curate_pdf.py [--papers 12000] [--pdfs 200] [--pdf-pages 12]

Curation runs on generated ingest frames (realistic review lengths, every rule firing); PDF
extraction on PDFs written with pymupdf, in-process and with the process pool. Prints the
figures, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import polars as pl
import pymupdf

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tasks.core.config import Config, CurateConfig, VenueConfig  # noqa: E402
from tasks.core.schema import PAPERS, REVIEWS, conform  # noqa: E402

VENUE = "Bench.cc/2025/Conference"
TEN_POINT = {"1": 1, "2": 1, "3": 3, "4": 5, "5": 5, "6": 6, "7": 8, "8": 8, "9": 10, "10": 10}
WORDS = ["model", "data", "results", "method", "baseline", "ablation", "proof", "theorem", "figure", "table", "clarity", "novelty", "experiment", "dataset", "training", "evaluation", "metric", "limitation", "assumption", "analysis"]


def ingest_frames(n_papers: int, seed: int = 0) -> tuple[pl.DataFrame, pl.DataFrame]:
    rng = random.Random(seed)
    statuses = ["active"] * 18 + ["withdrawn", "desk_rejected"]
    papers = pl.DataFrame({
        "paper_id": [f"P{i:06d}" for i in range(n_papers)],
        "venue_id": VENUE,
        "status": [rng.choice(statuses) for _ in range(n_papers)],
        "title": [f"Paper {i}" for i in range(n_papers)],
    })
    rows = {"review_id": [], "paper_id": [], "rating": [], "confidence": []}
    for i in range(n_papers):
        base = rng.randint(3, 8)
        for j in range(rng.choice([3, 4, 4, 4, 5, 6])):
            rows["review_id"].append(f"R{i:06d}_{j}")
            rows["paper_id"].append(f"P{i:06d}")
            rows["rating"].append(float(min(10, max(1, base + rng.choice([-2, -1, 0, 0, 1, 2])))))
            rows["confidence"].append(float(rng.choice([2, 3, 4, 4, 5, 5])))
    body = " ".join(rng.choice(WORDS) for _ in range(400))   # ~3 KB, a typical review length
    reviews = pl.DataFrame(rows).with_columns(
        venue_id=pl.lit(VENUE),
        rating_raw=pl.format("{}: some words", pl.col("rating")),
        review_text=pl.format("## Summary\n\n{} {}", pl.col("review_id"), pl.lit(body)),
    )
    return conform(papers, PAPERS), conform(reviews, REVIEWS)


def bench_curate(n_papers: int) -> dict:
    from tasks.stages.curate.rules import curate_frames, curate_venue

    cfg = Config(venues={VENUE: VenueConfig(rating_map=TEN_POINT)}, curate=CurateConfig(sample_size=1000))
    papers, reviews = ingest_frames(n_papers)
    with tempfile.TemporaryDirectory() as tmp:
        ingest_dir, out_dir = Path(tmp) / "ingest", Path(tmp) / "curate"
        ingest_dir.mkdir()
        papers.write_parquet(ingest_dir / "papers.parquet")
        reviews.write_parquet(ingest_dir / "reviews.parquet")
        t = time.perf_counter()
        import tasks.stages.curate.expectations as expectations
        expectations._context()
        ge_setup = time.perf_counter() - t
        t = time.perf_counter()
        curate_frames(papers, reviews, VENUE, cfg)
        rules = time.perf_counter() - t
        t = time.perf_counter()
        result = curate_venue(ingest_dir, VENUE, cfg, out_dir)
        total = time.perf_counter() - t
        t = time.perf_counter()
        expectations.validate_curated(out_dir, ingest_dir, cfg)
        validate = time.perf_counter() - t
    return {"papers": n_papers, "reviews": reviews.height, "papers_kept": result.papers_kept,
            "reviews_kept": result.reviews_kept, "ge_import_s": round(ge_setup, 2),
            "rules_s": round(rules, 2), "validate_s": round(validate, 2), "curate_venue_s": round(total, 2)}


def make_pdf(pages: int, rng: random.Random) -> bytes:
    """A paper of about `pages` pages: numbered sections, related work, references, appendix."""
    doc = pymupdf.open()
    titles = ["1 Introduction", "2 Related Work", "3 Method", "4 Experiments", "5 Conclusion",
              "Acknowledgements", "References", "A Proofs"]
    lines_per_page = 50
    per_section = max(4, pages * lines_per_page // len(titles))
    page, y = doc.new_page(), 72
    for title in titles:
        for k, line in enumerate([title] + textwrap.wrap(" ".join(rng.choice(WORDS) for _ in range(per_section * 13)), 95)):
            if y > 740:
                page, y = doc.new_page(), 72
            font, size = ("hebo", 12) if k == 0 else ("tiro", 10)
            page.insert_text((72, y), line, fontname=font, fontsize=size)
            y += 13
    data = doc.tobytes()
    doc.close()
    return data


def bench_pdf(n_pdfs: int, pages: int) -> dict:
    from tasks.stages.ingest.pdf import extract_pdfs

    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        templates = [make_pdf(pages, rng) for _ in range(8)]
        ids = [f"P{i:05d}" for i in range(n_pdfs)]
        for i, paper_id in enumerate(ids):
            (folder / f"{paper_id}.pdf").write_bytes(templates[i % len(templates)])
        page_count = pymupdf.open(stream=templates[0], filetype="pdf").page_count
        t = time.perf_counter()
        texts, _ = extract_pdfs(folder, ids, workers=1)
        serial = time.perf_counter() - t
        t = time.perf_counter()
        extract_pdfs(folder, ids)   # default workers: one child process per file, one per core at once
        pooled = time.perf_counter() - t
    return {"pdfs": n_pdfs, "pages_per_pdf": page_count, "pdf_serial_s": round(serial, 2),
            "pdf_pool_s": round(pooled, 2), "pdf_ms_per_file_serial": round(1000 * serial / n_pdfs, 1),
            "body_chars_mean": int(texts["n_chars"].mean())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--papers", type=int, default=12_000)
    parser.add_argument("--pdfs", type=int, default=200)
    parser.add_argument("--pdf-pages", type=int, default=12)
    args = parser.parse_args()
    figures = bench_curate(args.papers)
    figures.update(bench_pdf(args.pdfs, args.pdf_pages))
    figures["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    for key, value in figures.items():
        print(f"{key:>24}: {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
