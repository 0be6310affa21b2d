"""Peak memory and time of scoring one very long review against a normal one (the fitting rule).

    .venv/bin/python bench/speed/long_inputs.py [--megabytes 5] [--normal-words 400]

In one process and in this order: a normal review (conditional and marginal request under the
embedded SmolLM2), then a review of `--megabytes` MB. Each step prints its time, the growth of
the process's peak resident memory (ru_maxrss) over the step and whether the engine cut the
requests (tasks/lm/fitting.py). The last line printed is JSON.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tasks.lm import LoglikelihoodRequest, ModelSpec, local_lm  # noqa: E402

SYSTEM = "You are an expert reviewer. Write the review of the paper."
WORDS = ["the", "method", "is", "sound", "but", "the", "evaluation", "omits", "two", "baselines", "and", "the", "proofs", "of", "the", "main", "theorem", "skip", "the", "boundary", "case", "which", "the", "authors", "should", "address", "in", "a", "revision"]


def review(n_words: int) -> str:
    return " ".join(WORDS[i % len(WORDS)] for i in range(n_words))


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def step(lm, text: str) -> dict[str, object]:
    before = peak_mb()
    started = time.perf_counter()
    results = lm.loglikelihood([LoglikelihoodRequest(SYSTEM, "Paper: a study of sparse attention.", text),
                                LoglikelihoodRequest(SYSTEM, "", text)])
    return {"chars": len(text), "seconds": round(time.perf_counter() - started, 2),
            "peak_rss_mb": round(peak_mb(), 1), "peak_growth_mb": round(peak_mb() - before, 1),
            "truncated": [r.truncated for r in results], "n_tokens": [r.n_tokens for r in results],
            "finite": all(abs(r.logprob) < float("inf") for r in results)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=float, default=5.0)
    parser.add_argument("--normal-words", type=int, default=400)
    args = parser.parse_args()
    lm = local_lm(ModelSpec())
    lm.loglikelihood([LoglikelihoodRequest(SYSTEM, "warm-up", "ok")])
    loaded = round(peak_mb(), 1)
    normal = step(lm, review(args.normal_words))
    print(f"normal review: {normal}", flush=True)
    long_text = review(int(args.megabytes * 1e6 / 6.5))
    long = step(lm, long_text)
    print(f"{args.megabytes:g} MB review: {long}", flush=True)
    print(json.dumps({"model_loaded_rss_mb": loaded, "window_tokens": lm.engine.window, "normal": normal,
                      "long": long, "time_ratio": round(long["seconds"] / max(normal["seconds"], 1e-9), 1)}))


if __name__ == "__main__":
    main()
