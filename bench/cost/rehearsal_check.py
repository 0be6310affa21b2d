"""The cost plan (bench/cost/refresh_cost.py) checked against what a rehearsal run counted.

`check_costs` projects the rehearsal's venue with refresh_cost's own functions: its submissions, the
share of them curation kept, the pipeline's sample, candidates, metrics and validation settings, and
the text sizes measured from the run's outputs (reviews per sampled paper, tokens per review, judgment
lines per review and tokens per line with the embedded tokenizer; the abstracts and the paper text the
stages read). It sets the projection beside the run's counts: the requests the local server answered
(ingest), the LLM calls and tokens of the run record (preprocess, generate) and the (candidate,
reference) pairs the score stage scored. Used by bench/soak/rehearsal.py; `ratio` is projected / counted.

With a pilot (the data folder of another rehearsal run, e.g. a smaller size run first) the text sizes
and the chat models' behaviour (retry shares, answer lengths: refresh_cost's `measure_behaviour`) come
from the pilot, so the plan predicts LLM work it has not seen. What curation gives is taken from the
checked run itself (`curated_counts`: the papers kept, the sample and its reviews per paper), as the
refresh knows it before its first LLM request. Without a pilot everything comes from the checked run and
the behaviour is the plan's default (answered once, answers as long as what they keep).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl

from bench.cost.refresh_cost import (
    Behaviour,
    Shape,
    gem_prompt_overhead,
    ingest_plan,
    measure_behaviour,
    project,
)
from tasks.core.config import load_config
from tasks.lm.loading import load_tokenizer

TOLERANCE = 0.10   # the plan must be within 10% of the rehearsal's counts


def measured_shape(data: Path, tokenizer: Any) -> tuple[Shape, dict[str, float]]:
    """Text sizes of the sampled papers, from the run's curate and preprocess outputs."""
    curated = pl.concat([pl.read_parquet(p) for p in sorted(data.glob("*/curate/reviews.parquet"))])
    papers = pl.concat([pl.read_parquet(p) for p in sorted(data.glob("*/curate/papers.parquet"))])
    sample = papers.filter(pl.col("in_benchmark"))
    judgments = pl.read_parquet(data / "preprocess" / "judgments.parquet")
    sampled = curated.filter(pl.col("paper_id").is_in(sample["paper_id"].implode()))
    count = lambda texts: [len(tokenizer(t or "", add_special_tokens=False)["input_ids"]) for t in texts]  # noqa: E731
    review_tokens = count(sampled["review_text"].to_list())
    lines = judgments["text"].to_list()
    shape = Shape(reviews_per_paper=sampled.height / max(sample.height, 1),
                  review_tokens=sum(review_tokens) / max(len(review_tokens), 1),
                  lines_per_review=len(lines) / max(judgments["review_id"].n_unique(), 1),
                  line_tokens=sum(count(lines)) / max(len(lines), 1), measured_from=str(data))
    abstracts = count(sample["abstract"].to_list())
    return shape, {"abstract_tokens": sum(abstracts) / max(len(abstracts), 1), "sampled": sample.height,
                   "curated": papers.height}


def curated_counts(data: Path) -> dict[str, float]:
    """What the refresh knows once curation has run, before any LLM is asked: the papers curation kept, the
    sample's size and its reviews per paper (a sample of a few papers with 4 or 5 reviews each varies by a
    fifth from one draw to the next, so a pilot's figure would not predict another run's)."""
    papers = pl.concat([pl.read_parquet(p) for p in sorted(data.glob("*/curate/papers.parquet"))])
    reviews = pl.concat([pl.read_parquet(p) for p in sorted(data.glob("*/curate/reviews.parquet"))])
    sample = papers.filter(pl.col("in_benchmark"))
    sampled = reviews.filter(pl.col("paper_id").is_in(sample["paper_id"].implode())).height
    return {"curated": papers.height, "sampled": sample.height, "reviews_per_paper": sampled / max(sample.height, 1)}


def check_costs(config: Path, pipeline: str, submissions: int, stages: list[dict],
                pilot: tuple[Path, int] | None = None) -> dict[str, Any]:
    """Projected and counted figures per stage, their ratio, and one printable line each. `pilot`: the
    data folder of another run and its submissions, from which the plan takes its text sizes and the chat
    models' behaviour; the counts curation gives (`curated_counts`) are this run's own, as the refresh
    knows them before its first LLM request."""
    cfg = load_config(config).for_pipeline(pipeline)
    data = config.parent / "data" / pipeline
    tokenizer = load_tokenizer()
    shape, sizes = measured_shape(pilot[0] if pilot else data, tokenizer)
    behaviour = measure_behaviour(pilot[0]) if pilot else Behaviour()
    curated = curated_counts(data)
    shape = replace(shape, reviews_per_paper=curated["reviews_per_paper"])
    kept_share = curated["curated"] / submissions
    candidates = cfg.generate.candidates
    args = argparse.Namespace(
        submissions=submissions, venues=1, keep=kept_share, candidates=len(candidates),
        negatives=cfg.score.negatives, oracle_cells=[], judges=0, abstract_tokens=sizes["abstract_tokens"],
        assw_tokens=0, paper_tokens=cfg.preprocess.max_paper_chars / 3.5, context_tokens=max(c.max_context_tokens
                                                                                            for c in candidates),
        candidate_input_price=0.0, candidate_output_price=0.0, edited_share=0.0, pdf_history_share=0.0,
        sample_size=cfg.curate.sample_size, pipeline=pipeline, config=str(config),
        candidate_output_tokens=max(c.max_tokens for c in candidates))
    planned = {s.stage: s for s in project(args, shape, gem_prompt_overhead(tokenizer), behaviour)}
    ingest, _ = ingest_plan(args, shape.reviews_per_paper)
    counted = {s["stage"]: s for s in stages}
    pairs = 0.0
    if "score.gem" in planned:   # conditional GEM requests per metric = pairs
        gem = [m for m in cfg.score.metrics if m.startswith("gem")]
        pairs = min(cfg.curate.sample_size, submissions * kept_share) * (args.candidates * shape.reviews_per_paper
                                    + shape.reviews_per_paper * (shape.reviews_per_paper - 1))
        pairs = pairs if gem else 0.0
    checks = {
        "ingest requests": (ingest.requests, counted["ingest"]["requests"]),
        "preprocess calls": (planned["preprocess"].requests, counted["preprocess"]["llm_calls"]),
        "preprocess input tokens": (planned["preprocess"].input_tokens, counted["preprocess"]["input_tokens"]),
        "preprocess output tokens": (planned["preprocess"].output_tokens, counted["preprocess"]["output_tokens"]),
        "generate calls": (planned["generate"].requests, counted["generate"]["llm_calls"]),
        "generate input tokens": (planned["generate"].input_tokens, counted["generate"]["input_tokens"]),
        "generate output tokens": (planned["generate"].output_tokens, counted["generate"]["output_tokens"]),
        "score pairs": (pairs, counted["score"]["rows_in"]),
    }
    source = (f"text sizes and behaviour from the pilot {pilot[0]}, the curated sample from this run" if pilot
              else "shape from this run, no pilot")
    out: dict[str, Any] = {"shape": shape.__dict__, "behaviour": behaviour.__dict__, "figures": {},
                           "lines": [f"cost plan vs rehearsal (projected / counted; {source}):"]}
    for name, (projected, seen) in checks.items():
        ratio = projected / seen if seen else float("nan")
        ok = seen and abs(ratio - 1) <= TOLERANCE
        out["figures"][name] = {"projected": round(projected, 1), "counted": seen, "ratio": round(ratio, 3),
                                "within_10pct": bool(ok)}
        out["lines"].append(f"  {name:<26}{projected:>12,.0f}{seen:>12,}  ratio {ratio:6.3f}  {'ok' if ok else 'OFF'}")
    out["all_within_10pct"] = all(f["within_10pct"] for f in out["figures"].values())
    return out
