"""The qualification exam (tasks/qualify) of one judge on real ICLR 2023 reviews.

    python bench/qualify_exam.py                       # the embedded SmolLM2, logit readout
    python bench/qualify_exam.py --backend anthropic --model claude-haiku-4-5   # an API model, stated confidence

Reads ../shared/data/iclr2023_dev.parquet (three reviews per paper, no abstracts). The exam's
reviews are reviewers 1 and 2; the synopsis shown is the "Summary Of The Paper" section of
reviewer 3 (the data has no abstracts); every paper is of the same venue; the statements of the
consistency test are the GPT-4o judgment lines shipped with the data. One model sits the
exam, so the "mean" thresholds are its own scores and it passes consistency / pertinence only above
chance. Prints the table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tasks.config import LLMConfig, QualifyConfig, ScoreConfig  # noqa: E402
from tasks.metrics.llm_log import LLMLog  # noqa: E402
from tasks.qualify.exam import draw_exam  # noqa: E402
from tasks.qualify.grade import grade  # noqa: E402
from tasks.qualify.stage import Seat, examinee, llm_key, sit_exam  # noqa: E402


def summary_section(review: str) -> str:
    match = re.search(r"Summary Of The Paper:?\s*(.*?)(?:\n\s*\n[A-Z][^\n]{0,60}:|\Z)", review, re.S | re.I)
    return (match.group(1) if match else review[:800]).strip()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "iclr2023_dev.parquet"))
    parser.add_argument("--items", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", default="local")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--max-chars", type=int, default=2000, help="each review cut to this many characters")
    args = parser.parse_args()
    data = pl.read_parquet(args.data)
    reviews = (data.filter(pl.col("reviewer") < 3)
               .select("paper_id", pl.format("{}-{}", "paper_id", "reviewer").alias("review_id"),
                       pl.col("review").str.slice(0, args.max_chars).alias("review_text"),
                       pl.col("judgments_reference").alias("judgments")))
    synopses = {p: f"Summary by another referee:\n{summary_section(r)}"
                for p, r in data.filter(pl.col("reviewer") == 3).select("paper_id", "review").iter_rows()}
    groups = dict.fromkeys(data["paper_id"].unique().to_list(), "ICLR.cc/2023/Conference")
    questions = draw_exam(reviews, synopses, groups, args.items, args.seed)
    llm = LLMConfig(backend=args.backend, model=args.model, base_url=args.base_url, use_batches=False)
    seat = Seat(llm_key(llm), "judge", llm=llm)
    log = LLMLog()
    started = time.perf_counter()
    scores = sit_exam(questions, [seat], lambda s: examinee(s, ScoreConfig(), ROOT / "data" / "cache" / "llm", log))
    seconds = time.perf_counter() - started
    table = grade(scores, QualifyConfig())
    with pl.Config(tbl_rows=20, tbl_width_chars=160):
        print(table)
    print(json.dumps({"model": seat.name, "questions": len(questions), "seconds": round(seconds, 1),
                      **{r["test"]: {"n": r["n"], "score": round(r["score"], 4), "passed": r["passed"]}
                         for r in table.iter_rows(named=True)}}))


if __name__ == "__main__":
    main()
