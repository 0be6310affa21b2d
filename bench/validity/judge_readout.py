"""The LLM judge's two ways of reading a rating, side by side on the same questions.

`llm_judge` questions (synopsis, the paper's other human reviews, the candidate review) built from the
synthetic venue the demo serves, answered by the embedded SmolLM2 judge:

* generate: "Score:" prefilled, 8 new tokens at most, the number parsed (the demo's judge before);
* readout: the expectation over 0-10 at the answer position (tasks/lm/readout.py), no generation.

Prints the seconds of each (interleaved, after one warm-up call each), how many questions each
answered with a number, and the ratio; the last line is JSON.

    PYTHONPATH=. .venv/bin/python bench/validity/judge_readout.py [--papers 3] [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import math
import time


def _readable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def questions(n_papers: int) -> list[tuple[str, str]]:
    """(system, user) of llm_judge for each review of the first papers: the others are its references."""
    from tasks.metrics.judge import judge_user, load_prompt
    from tasks.testing.synthetic import make_venue

    venue = make_venue("GREBench.cc/2025/Demo", n_papers=n_papers, reviews_per_paper=4, seed=0)
    system = load_prompt("judge-reference-v1")
    out = []
    for paper in venue.papers[:n_papers]:
        texts = [t for t in ("\n\n".join(f"{k}: {v}" for k, v in r.fields.items()) for r in paper.reviews)
                 if _readable(t)]   # the venue plants unreadable reviews, which ingest rejects
        synopsis = f"Abstract:\n{paper.abstract}"
        for i, text in enumerate(texts):
            out.append((system, judge_user(synopsis, text, [t for j, t in enumerate(texts) if j != i])))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--papers", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()

    from tasks.lm import ModelSpec, local_lm
    from tasks.lm.readout import expected_ratings
    from tasks.lm.types import ChatRequest
    from tasks.metrics.judge import MAX_ANSWER_TOKENS
    from tasks.metrics.rating import RATING_PREFILL, SCALE, parse_rating

    asked = questions(args.papers)
    lm = local_lm(ModelSpec("smollm2"))

    def generate() -> list[float]:
        results = lm.generate([ChatRequest(s, u, MAX_ANSWER_TOKENS, prefill=RATING_PREFILL) for s, u in asked])
        return [parse_rating(r.text) if r.error is None else math.nan for r in results]

    def readout() -> list[float]:
        return [r.expected if r is not None else math.nan for r in expected_ratings(lm, asked, RATING_PREFILL, SCALE)]

    generate(), readout()                      # warm-up: model load, prefix caches
    seconds = {"generate": 0.0, "readout": 0.0}
    values: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for name, fn in (("generate", generate), ("readout", readout)):
            lm.engine._heads.clear()           # no prompt cache carried over from the other method
            t0 = time.perf_counter()
            values[name] = fn()
            seconds[name] += time.perf_counter() - t0
    answered = {k: sum(not math.isnan(v) for v in vs) for k, vs in values.items()}
    figures = {"questions": len(asked), "repeats": args.repeats,
               **{f"{k}_s": round(v / args.repeats, 2) for k, v in seconds.items()},
               **{f"{k}_answered": v for k, v in answered.items()},
               "readout_over_generate": round(seconds["readout"] / seconds["generate"], 3) if seconds["generate"] else None,
               "readout_mean": round(sum(values["readout"]) / len(asked), 3) if asked else None}
    for k, v in figures.items():
        print(f"{k:>24}: {v}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
