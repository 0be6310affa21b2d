"""Generate stage: candidate LLMs review the benchmark papers they cannot have seen; their reviews
are preprocessed into judgments exactly like the human ones."""

from __future__ import annotations

import polars as pl
from prefect import flow

from tasks.config import load_config
from tasks.generate_stage import (
    as_reviews,
    empty_frames,
    exclude_task,
    generate_reviews_task,
    read_generate_inputs_task,
    write_generate_outputs_task,
)
from tasks.layout import cache_dir
from tasks.lm import make_lm
from tasks.preprocess import preprocess_reviews_task


@flow(name="generate", log_prints=True)
def generate_flow(config_path: str = "pipelines.toml", pipeline: str = "demo") -> dict:
    cfg = load_config(config_path).for_pipeline(pipeline)
    papers, pdf_texts = read_generate_inputs_task(cfg, pipeline)
    frames = empty_frames()
    outputs, exclusions = [], [frames["exclusions"]]
    for candidate in cfg.generate.candidates:
        eligible, excluded = exclude_task(papers, candidate.name, candidate.knowledge_cutoff)
        backend = make_lm(candidate, cache_dir(cfg, "llm"))
        outputs.append(generate_reviews_task(eligible, pdf_texts, candidate, backend, cfg.generate.chars_per_token))
        exclusions.append(excluded)
    candidates = pl.concat([frames["candidates"], *(o.candidates for o in outputs)])
    judged = preprocess_reviews_task(as_reviews(candidates), make_lm(cfg.preprocess, cache_dir(cfg, "llm")),
                                     cfg.preprocess)
    usage = pl.concat([*(o.usage for o in outputs), judged.usage.with_columns(purpose=pl.lit("candidate_judgments"))])
    rejects = pl.concat([*(o.rejects for o in outputs), judged.rejects])
    write_generate_outputs_task(cfg, pipeline, {
        "candidates": candidates,
        "exclusions": pl.concat(exclusions),
        "rejects": rejects,
        "usage": usage,
        "candidate_judgments": judged.judgments,
    })
    per_model = {c.name: {**o.stats, "excluded": e.height}
                 for c, o, e in zip(cfg.generate.candidates, outputs, exclusions[1:], strict=True)}
    summary = {
        "benchmark_papers": papers.height,
        "candidates": candidates.height,
        "exclusions": sum(e.height for e in exclusions),
        "rejects": rejects.height,
        "candidate_judgments": judged.judgments.height,
        "per_model": per_model,
        "llm_calls": int((usage["requests"] - usage["cached"]).sum()),
        "llm_cached": int(usage["cached"].sum()),
        "input_tokens": int(usage["input_tokens"].sum()),
        "output_tokens": int(usage["output_tokens"].sum()),
        "cost_usd": round(float(usage["cost_usd"].sum()), 6),
    }
    print(f"generate {pipeline}: {summary}")
    return summary
