"""The qualification exam (tasks/stages/qualify) of a judge, a point matcher or a readout oracle panel on
real ICLR 2023 reviews.

    python bench/validity/qualify_exam.py                       # the embedded SmolLM2 as judge, logit readout
    python bench/validity/qualify_exam.py --backend anthropic --model claude-haiku-4-5   # an API model, stated confidence
    python bench/validity/qualify_exam.py --roles matcher       # SmolLM2 as the point matcher (point-match-v1)
    python bench/validity/qualify_exam.py --roles panel --readouts smollm2 smollm2:bfloat16   # each panel member as oracle

Reads ../shared/data/iclr2023_dev.parquet (three reviews per paper, no abstracts). The exam's
reviews are reviewers 1 and 2; the synopsis shown is the "Summary Of The Paper" section of
reviewer 3 (the data has no abstracts); every paper is of the same venue; the statements of the
consistency test are the GPT-4o judgment lines shipped with the data. The matcher's pairs are the
sentences of reviewers 1 and 2 (the data has no atomic points; tasks/stages/qualify/matcher.py). The panel's
members (`name` or `name:dtype`) each sit the judges' exam as oracle seats, read by logits, and are
graded against their mean. A lone model's "mean" thresholds are its own scores, so it passes
consistency / pertinence only above chance. Prints the table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tasks.core.config import LLMConfig, QualifyConfig, ScoreConfig  # noqa: E402
from tasks.lm import ModelSpec  # noqa: E402
from tasks.metrics.llm_log import LLMLog  # noqa: E402
from tasks.stages.qualify.exam import draw_exam  # noqa: E402
from tasks.stages.qualify.grade import grade  # noqa: E402
from tasks.stages.qualify.matcher import draw_match_exam, exam_units, match_scores  # noqa: E402
from tasks.stages.qualify.stage import Seat, examinee, llm_key, sit_exam  # noqa: E402


def summary_section(review: str) -> str:
    match = re.search(r"Summary Of The Paper:?\s*(.*?)(?:\n\s*\n[A-Z][^\n]{0,60}:|\Z)", review, re.S | re.I)
    return (match.group(1) if match else review[:800]).strip()


@dataclass
class Recorded:
    """An examinee's answers, already given (so the bench can also break them down)."""

    name: str
    confidence: str
    verdicts: list

    def answer(self, questions: list) -> list:
        return self.verdicts


def breakdown(questions: list, verdicts: list) -> dict[str, float | None]:
    """The matcher's verdicts per kind of pair: share of Yes, and mean confidence on the easy and hard sets."""
    def share_yes(keep) -> float | None:
        got = [v.choice for q, v in zip(questions, verdicts, strict=True) if keep(q) and v.choice is not None]
        return round(sum(got) / len(got), 4) if got else None

    def confidence(kind: str) -> float | None:
        got = [v.confidence for q, v in zip(questions, verdicts, strict=True) if q.set == kind and v.choice is not None]
        return round(sum(got) / len(got), 4) if got else None

    return {"yes_restatement": share_yes(lambda q: q.set == "pertinence" and q.target),
            "yes_polished_other_paper": share_yes(lambda q: q.set == "pertinence" and q.target is False),
            "yes_other_paper": share_yes(lambda q: q.set == "easy"),
            "yes_closest_same_paper": share_yes(lambda q: q.set == "consistency"),
            "yes_all": share_yes(lambda q: True),
            "confidence_easy": confidence("easy"), "confidence_hard": confidence("hard")}


def member(text: str) -> ModelSpec:
    """"smollm2" or "smollm2:bfloat16": a readout panel member's spec."""
    name, _, dtype = text.partition(":")
    return ModelSpec(name=name, dtype=dtype or "auto")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "iclr2023_dev.parquet"))
    parser.add_argument("--items", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--roles", nargs="+", default=["judge"], choices=["judge", "matcher", "panel"])
    parser.add_argument("--backend", default="local")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--readouts", nargs="+", default=["smollm2", "smollm2:bfloat16"],
                        help="the readout panel's members (--roles panel): name or name:dtype")
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
    llm = LLMConfig(backend=args.backend, model=args.model, base_url=args.base_url, use_batches=False)
    log = LLMLog()
    make = lambda s: examinee(s, ScoreConfig(), ROOT / "data" / "cache" / "llm", log)  # noqa: E731
    parts, figures = [], {}
    for role in args.roles:
        started, cpu = time.perf_counter(), time.process_time()
        if role == "matcher":
            units, unit = exam_units(reviews, None)
            questions = draw_match_exam(units, groups, args.items, args.seed)
            seat = Seat(llm_key(llm), "matcher", llm=llm)
            who = make(seat)
            recorded = Recorded(who.name, who.confidence, who.answer(questions))
            parts.append(sit_exam(questions, [seat], lambda _, r=recorded: r, match_scores))
            verdicts = recorded.verdicts
            figures["matcher_breakdown"] = breakdown(questions, verdicts)
        else:
            questions = draw_exam(reviews, synopses, groups, args.items, args.seed)
            unit = "reviews"
            seated = ([Seat(llm_key(llm), "judge", llm=llm)] if role == "judge" else
                      [Seat(f"readout:{m.resolved().key}", "oracle", spec=m) for m in map(member, args.readouts)])
            parts.append(sit_exam(questions, seated, make))
        figures[role] = {"questions": len(questions), "units": unit, "seconds": round(time.perf_counter() - started, 1),
                         "cpu_seconds": round(time.process_time() - cpu, 1)}
    table = grade(pl.concat(parts), QualifyConfig())
    with pl.Config(tbl_rows=40, tbl_width_chars=200, fmt_str_lengths=40):
        print(table)
    results: dict[str, dict] = {}
    for r in table.iter_rows(named=True):
        results.setdefault(f"{r['role']}:{r['model']}", {})[r["test"]] = {
            "n": r["n"], "score": None if r["score"] != r["score"] else round(r["score"], 4),
            "threshold": round(r["threshold"], 4), "passed": r["passed"]}
    print(json.dumps({"items": args.items, "max_chars": args.max_chars, "runs": figures, "results": results}))


if __name__ == "__main__":
    main()
