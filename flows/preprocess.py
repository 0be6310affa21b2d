"""Preprocess stage: curated reviews -> atomic judgments; papers -> abstract and ASSW synopses."""

from __future__ import annotations

import polars as pl
from prefect import flow

from tasks.config import load_config
from tasks.layout import cache_dir
from tasks.lm import make_lm
from tasks.preprocess import make_synopses_task, preprocess_reviews_task, read_inputs_task, write_outputs_task


@flow(name="preprocess", log_prints=True)
def preprocess_flow(config_path: str = "pipelines.toml", pipeline: str = "demo") -> dict:
    cfg = load_config(config_path).for_pipeline(pipeline)
    reviews, papers, pdf_texts = read_inputs_task(cfg, pipeline)
    backend = make_lm(cfg.preprocess, cache_dir(cfg, "llm"))
    judged = preprocess_reviews_task(reviews, backend, cfg.preprocess)
    synopses, synopsis_rejects, synopsis_usage = make_synopses_task(papers, pdf_texts, backend, cfg.preprocess)
    usage = pl.concat([judged.usage, synopsis_usage])
    write_outputs_task(cfg, pipeline, {
        "judgments": judged.judgments,
        "synopses": synopses,
        "rejects": pl.concat([judged.rejects, synopsis_rejects]),
        "usage": usage,
    })
    summary = {
        **judged.stats,
        "judgments": judged.judgments.height,
        "synopses": synopses.height,
        "rejects": judged.rejects.height + synopsis_rejects.height,
        "llm_requests": int(usage["requests"].sum()),
        "llm_calls": int((usage["requests"] - usage["cached"]).sum()),
        "input_tokens": int(usage["input_tokens"].sum()),
        "output_tokens": int(usage["output_tokens"].sum()),
        "llm_cached": int(usage["cached"].sum()),
        "cost_usd": round(float(usage["cost_usd"].sum()), 6),
    }
    print(f"preprocess {pipeline}: {summary}")
    return summary
