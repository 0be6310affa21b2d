"""Atomic points and human-vs-human point matching on real ICLR 2023 reviews (Beyond Rating's metrics).

Reads ../shared/data/iclr2023_dev.parquet (never copied into the repository): three reviews per
paper, whose "Strength And Weaknesses" section is one merged field, so the point extractor splits
it into strength and weakness points itself (`split_from`). For the first --papers papers:

- points per review and per field, the category distribution of strengths and weaknesses, and
  the share of fields rejected (no usable point after one retry);
- human-vs-human reference: each review scored as a candidate against the paper's other two
  (leave-one-out) with the same metrics a generated review gets: point precision and Max-Recall
  per field (MiniLM pre-filter, --top-k human points judged per candidate point);
- wall time of extraction and of matching.

    PYTHONPATH=. python bench/validity/review_quality.py --papers 3 --max-tokens 160

The backend is the embedded SmolLM2 unless --backend anthropic (ANTHROPIC_API_KEY) is given. The
last line printed is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import polars as pl  # noqa: E402

from tasks.core.config import LLMConfig  # noqa: E402
from tasks.core.frames import human_candidates  # noqa: E402
from tasks.core.schema import REFERENCES, SYNOPSES_WIDE  # noqa: E402
from tasks.lm import make_lm  # noqa: E402
from tasks.metrics import Resources, score_with_tables  # noqa: E402
from tasks.metrics.resources import token_embeddings  # noqa: E402
from tasks.metrics.review_quality.formulas import CATEGORIES  # noqa: E402
from tasks.metrics.review_quality.work import (  # noqa: E402
    PAPER_FACTS,
    REVIEW_FACTS,
    QualitySettings,
    QualityWork,
    ReviewFacts,
)

DATA = ROOT.parent / "shared" / "data" / "iclr2023_dev.parquet"
TITLES = {"summary of the paper": "Summary", "strength and weaknesses": "Strengths and Weaknesses"}
SECTIONS = ("Summary Of The Paper", "Strength And Weaknesses", "Clarity, Quality, Novelty And Reproducibility",
            "Summary Of The Review")   # the dev file's sections (its README); sub-headings stay in their section
METRICS = ["points_precision_strengths", "points_recall_strengths", "points_precision_weaknesses",
           "points_recall_weaknesses"]


def render(review: str) -> str:
    """The dev file's "Title:" sections as the "## Title" blocks ingest renders (others left out)."""
    parts = re.split(f"^({'|'.join(SECTIONS)}):\\s*$", review, flags=re.MULTILINE)
    blocks = []
    for title, body in zip(parts[1::2], parts[2::2], strict=False):
        name = TITLES.get(title.strip().lower())
        if name and body.strip():
            blocks.append(f"## {name}\n\n{body.strip()}")
    return "\n\n".join(blocks)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--papers", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--backend", default="local")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--cache", default="", help="LLM answer cache folder (default: a temporary one)")
    args = parser.parse_args()
    data = pl.read_parquet(DATA)
    papers = data["paper_id"].unique(maintain_order=True).head(args.papers)
    rows = data.filter(pl.col("paper_id").is_in(papers.implode()))
    refs = pl.DataFrame([{"paper_id": p, "review_id": f"{p}-{r}", "review_text": render(t), "judgments": None}
                         for p, r, t in rows.select("paper_id", "reviewer", "review").iter_rows()], schema=REFERENCES)
    cands = human_candidates(refs)
    facts = ReviewFacts(pl.DataFrame(schema=REVIEW_FACTS), pl.DataFrame(schema=PAPER_FACTS))
    syn = pl.DataFrame(schema=SYNOPSES_WIDE)
    cfg = LLMConfig(backend=args.backend, model=args.model, batch_size=4, use_batches=False)
    with tempfile.TemporaryDirectory() as scratch:
        cache = Path(args.cache or scratch)
        work = QualityWork(QualitySettings(match_top_k=args.top_k, points_max_tokens=args.max_tokens), facts,
                           make_lm(cfg, cache))
        start = time.perf_counter()
        scored = score_with_tables(METRICS, cands, refs, syn, Resources("bench", embed=token_embeddings, quality=work))
        scores = scored.scores
        wall = time.perf_counter() - start
    points = scored.tables["points"]
    per_review = points.group_by("review_id").len()["len"]
    figures = {
        "papers": papers.len(), "reviews": refs.height, "points": points.height,
        "points_per_review": round(points.height / refs.height, 2),
        "points_per_review_max": int(per_review.max() or 0),
        "fields_rejected": int(scored.counts.get("points_rejected", 0)),
        "fields": int(scored.counts.get("points_fields", 0)),
        "lines_repaired": int(scored.counts.get("points_repaired", 0)),
        "lines_dropped": int(scored.counts.get("points_dropped_lines", 0)),
        "match_pairs_asked": int(scored.counts.get("match_asked", 0)),
        "match_yes": int(scored.counts.get("match_matched", 0)),
        "wall_s": round(wall, 1),
    }
    for name in ("strengths", "weaknesses"):
        counts = Counter(points.filter(pl.col("field") == name)["category"].to_list())
        total = max(sum(counts.values()), 1)
        figures[f"categories_{name}"] = {c: round(counts[c] / total, 3) for c in CATEGORIES if counts[c]}
    valid = scores.filter(pl.col("score").is_not_nan())
    for metric in METRICS:
        part = valid.filter(pl.col("metric") == metric)["score"]
        figures[f"human_vs_human_{metric}"] = None if part.is_empty() else round(float(part.mean()), 3)
        figures[f"human_vs_human_{metric}_n"] = part.len()
    gaps = scores.filter(pl.col("reason").is_not_null()).group_by("reason").len()
    figures["gaps"] = dict(gaps.iter_rows())
    for key, value in figures.items():
        print(f"{key}: {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
