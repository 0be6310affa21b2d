"""The preprocess stage around the extractor of tasks/judgments/extract.py: its LLM, and what it
writes (judgments, synopses, rejects, LLM usage) under data/<pipeline>/preprocess/."""

from __future__ import annotations

import polars as pl

from tasks.core.config import Config
from tasks.core.layout import cache_dir, write_stage_frames
from tasks.core.summary import StageSummary, llm_figures
from tasks.judgments.extract import PreprocessOutput, Synopses
from tasks.lm import CachedLM, make_lm


def write_outputs(cfg: Config, pipeline: str, judged: PreprocessOutput, synopses: Synopses) -> StageSummary:
    """Each frame to preprocess/<name>.parquet, replaced atomically (a rerun overwrites); the summary.
    Its LLM figures say how much a rerun or a resumed run reused: `llm_cached` requests answered from the
    answer cache (stored by an earlier run, also one killed half way), `llm_sent` asked this run."""
    usage = pl.concat([judged.usage, synopses.usage])
    rejects = pl.concat([judged.rejects, synopses.rejects])
    write_stage_frames(cfg, pipeline, "preprocess", {
        "judgments": judged.judgments,
        "synopses": synopses.synopses,
        "rejects": rejects,
        "usage": usage,
    })
    details = {**judged.stats, "synopses": synopses.synopses.height, "rejects": rejects.height,
               "llm_requests": int(usage["requests"].sum()), "llm_cached": int(usage["cached"].sum()),
               "llm_sent": int((usage["requests"] - usage["cached"]).sum())}
    return StageSummary(judged.stats["reviews_in"], judged.judgments.height, **llm_figures(usage), details=details)


def preprocess_lm(cfg: Config) -> CachedLM:
    """The `[preprocess]` LLM behind the run's answer cache."""
    return make_lm(cfg.preprocess, cache_dir(cfg, "llm"))
