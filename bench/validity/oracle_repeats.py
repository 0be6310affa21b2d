"""Repeated oracle calls on real reviews: how the spread of a sampled oracle cell falls with k draws.

    PYTHONPATH=. python bench/validity/oracle_repeats.py --papers 4 --draws 8 \
        [--data ../shared/data/iclr2023_dev.parquet] [--temperature 1.0]

The cell is `tvd_mi` (TV, f-variational, report level; the Scoring Rules paper's critic-style oracle):
every human review of a paper is a candidate scored against each other review of its paper (judgment
lines of the GEM release) and one negative reference from another paper. The oracle is the embedded
SmolLM2 sampling at `--temperature`; every question is asked `--draws` times (each draw its own request
and cache key, as `tvd_mi_sampled` asks them). For k = 1, 2, 4, ... the draws are split into disjoint
groups of k; each group gives the pair its score (the mean of the group's critics), and the spread of
those scores over the groups is the cell's noise at k draws. Printed per k: the mean over pairs of that
variance, its ratio to k = 1 (1/k if the draws were independent), and the mean distance of the k-draw
score from the readout oracle's score (the probability of each answer: the limit of many draws at
temperature 1). Figures only; nothing is tuned to this file. Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.validity.fmi_cells import references
from tasks.core.config import LLMConfig, ScoreConfig
from tasks.core.frames import human_candidates, reference_sets
from tasks.lm import ChatRequest, make_lm
from tasks.metrics.negatives import draw_negatives
from tasks.metrics.oracle_cells import critic_question, question_key
from tasks.metrics.panel import mean_of_members
from tasks.metrics.predictors import MAX_ANSWER_TOKENS, ask, parse_critic
from tasks.metrics.resources import build_resources


def pair_questions(papers: int, seed: int, data: str) -> tuple[list[tuple[str, str]], dict[str, tuple[str, str]]]:
    """The (positive, negative) question keys of every pair, and each key's (system, user)."""
    refs = references(data, papers, seed)
    cands = human_candidates(refs)
    negatives = draw_negatives(cands, refs, 1, seed)
    other = {(r["candidate"], r["reference"]): r["negative"] for r in negatives.iter_rows(named=True)}
    texts = {r["review_id"]: r["judgments"] for r in refs.iter_rows(named=True)}
    questions: dict[str, tuple[str, str]] = {}
    pairs = []
    for cand, cand_refs in reference_sets(cands, refs):
        for ref in cand_refs:
            keys = []
            for y in (ref["judgments"], texts[other[(cand["candidate"], ref["review_id"])]]):
                version, system, user = critic_question("report", cand["judgments"], y)
                keys.append(question_key(version, system, user))
                questions[keys[-1]] = (system, user)
            pairs.append((keys[0], keys[1]))
    return pairs, questions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/iclr2023_dev.parquet")
    parser.add_argument("--papers", type=int, default=4)
    parser.add_argument("--draws", type=int, default=8, help="draws per question (a power of 2)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    pairs, questions = pair_questions(args.papers, args.seed, args.data)
    keys = sorted(questions)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as cache:
        sampler = make_lm(LLMConfig(temperature=args.temperature), Path(cache))
        results = sampler.generate([ChatRequest(*questions[k], max_tokens=MAX_ANSWER_TOKENS, sample=d)
                                    for k in keys for d in range(args.draws)])
    sample_s = time.perf_counter() - started
    draws = np.array([parse_critic(r.text) for r in results]).reshape(len(keys), args.draws)
    row = {k: i for i, k in enumerate(keys)}
    started = time.perf_counter()
    readout = ask(build_resources(ScoreConfig()), "critic", questions, "oracle:readout")
    readout_s = time.perf_counter() - started
    limit = np.array([readout[p] - readout[n] for p, n in pairs])
    figures = []
    k = 1
    while k <= args.draws:
        groups = args.draws // k
        scores = np.array([[mean_of_members(draws[row[p], g * k:(g + 1) * k].tolist())
                            - mean_of_members(draws[row[n], g * k:(g + 1) * k].tolist()) for g in range(groups)]
                           for p, n in pairs])
        spread = np.nanvar(scores, axis=1, ddof=1) if groups > 1 else np.full(len(pairs), math.nan)
        figures.append({"k": k, "groups": groups, "pairs_scored": int(np.isfinite(scores).all(axis=1).sum()),
                        "mean_variance": float(np.nanmean(spread)) if groups > 1 else None,
                        "mean_abs_from_readout": float(np.nanmean(np.abs(scores - limit[:, None])))})
        k *= 2
    base = figures[0]["mean_variance"]
    for f in figures:
        f["variance_ratio_to_k1"] = round(f["mean_variance"] / base, 3) if f["mean_variance"] is not None else None
        print(f, flush=True)
    answered = float(np.isfinite(draws).mean())
    print(json.dumps({"papers": args.papers, "pairs": len(pairs), "questions": len(keys), "draws": args.draws,
                      "temperature": args.temperature, "answered_share": round(answered, 3),
                      "yes_share": round(float(np.nanmean(draws > 0)), 3), "sample_s": round(sample_s, 1),
                      "readout_s": round(readout_s, 1), "by_k": figures}))


if __name__ == "__main__":
    main()
