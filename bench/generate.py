"""How the demo's candidates fare on synthetic papers: usable answers, sections, cuts and speed.

Builds a synthetic venue (tasks/testing/synthetic.py), extracts the PDF texts, and has each candidate of
the chosen pipeline (default: the demo's two SmolLM2 candidates) review every paper with a fresh
cache, then once more to time the cached rerun. Prints per candidate:

- usable: share of papers that got a review (the rest went to rejects after one retry);
- sections: mean number of the four tagged parts per review; all_four: share with all four;
- truncated: share of papers cut to fit the context;
- seconds_per_review and tokens_per_second (local generate() time);
- rerun_seconds: the second pass, served from the cache (zero LLM calls).

    .venv/bin/python bench/generate.py --papers 4

The last line printed is JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tasks.core.config import load_config  # noqa: E402
from tasks.lm import make_lm  # noqa: E402
from tasks.stages.generate.reviews import generate_reviews  # noqa: E402
from tasks.stages.ingest.pdf import extract_text  # noqa: E402
from tasks.testing.demo import register_doubles  # noqa: E402
from tasks.testing.synthetic import make_venue  # noqa: E402

register_doubles()   # the demo's "served:smollm2" candidate, as the flows register it


def synthetic_papers(n: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    venue = make_venue("GREBench.cc/2025/Demo", n_papers=n, bad_cases=False)
    rows, texts = [], []
    for paper in venue.papers:
        rows.append({"paper_id": paper.paper_id, "venue_id": venue.venue_id, "title": paper.title,
                     "abstract": paper.abstract})
        if paper.pdf:
            texts.append({"paper_id": paper.paper_id, "text": extract_text(paper.pdf).text})
    return pl.DataFrame(rows), pl.DataFrame(texts)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--papers", type=int, default=4)
    parser.add_argument("--pipeline", default="demo")
    parser.add_argument("--config", default=str(Path(__file__).resolve().parents[1] / "pipelines.toml"))
    args = parser.parse_args()
    cfg = load_config(args.config).for_pipeline(args.pipeline)
    papers, texts = synthetic_papers(args.papers)
    figures: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as cache:
        for candidate in cfg.generate.candidates:
            backend = make_lm(candidate, Path(cache))
            started = time.perf_counter()
            out = generate_reviews(papers, texts, candidate, backend, cfg.generate.chars_per_token)
            seconds = time.perf_counter() - started
            started = time.perf_counter()
            again = generate_reviews(papers, texts, candidate, make_lm(candidate, Path(cache)),
                                     cfg.generate.chars_per_token)
            rerun = time.perf_counter() - started
            frame = out.candidates
            inner = backend.inner
            figures[candidate.name] = {
                "papers": papers.height,
                "usable": round(frame.height / papers.height, 3),
                "sections": round(float(frame["sections"].mean() or 0), 2),
                "all_four": round(float((frame["sections"] == 4).mean() or 0), 3),
                "truncated": round(float(frame["truncated"].mean() or 0), 3),
                "retried": out.stats["retried"],
                "seconds_per_review": round(seconds / papers.height, 2),
                "tokens_per_second": round(getattr(inner, "tokens_per_second", 0.0), 1),
                "rerun_seconds": round(rerun, 2),
                "rerun_llm_calls": int(again.usage["requests"][0] - again.usage["cached"][0]),
            }
            print(candidate.name, figures[candidate.name], flush=True)
            if frame.height:
                print(frame["review"][0][:600], flush=True)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
