"""The demo's scoring-engine work, before/after side by side: CPU seconds of the log-likelihood engine
on the demo's own score-stage requests (GEM shards, the tv_fvar_statement readout questions and the
llm_judge's questions with their 0-10 answers),
the engine of a given git revision against this tree's, alternating, in one process.

    PYTHONPATH=. python bench/speed/demo_engine.py --before 2212908     # after `grebench run demo`

Prints per workload: requests, forward and padded tokens, CPU seconds of each engine, the ratio and
the largest difference of a request's log-probability; last line JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
import torch


def _old_module(revision: str, path: str, name: str, replace: tuple[str, str] | None = None):
    source = subprocess.run(["git", "show", f"{revision}:{path}"], check=True, capture_output=True, text=True).stdout
    if replace:
        source = source.replace(*replace)
    file = Path(tempfile.mkdtemp()) / f"{name}.py"
    file.write_text(source)
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def old_engine_class(revision: str):
    """The engine of `revision`, with the attention rule of the same revision."""
    flat = _old_module(revision, "tasks/lm/flat_attention.py", "old_flat_attention")
    module = _old_module(revision, "tasks/lm/loglikelihood.py", "old_loglikelihood",
                         ("from tasks.lm.flat_attention import", "from old_flat_attention import"))
    return _own_attention(module.LoglikelihoodEngine, flat)


def _own_attention(engine_class, flat):
    """`engine_class`, registering its revision's attention function before each engine is made: two
    revisions in one process share transformers' registry under one name, and the first would serve both
    (a mask whose plan the other revision does not know would fall back to dense attention)."""

    def make(*args, **kwargs):
        from transformers import AttentionInterface

        if hasattr(flat, "_attention"):
            AttentionInterface.register(flat.NAME, flat._attention)
        return engine_class(*args, **kwargs)

    return make


def readout_requests(pipeline: str):
    """The oracle questions the score stage asks for tv_fvar_statement, each with its two answers."""
    from tasks.core.config import load_config
    from tasks.core.layout import stage_dir
    from tasks.core.schema import ORACLE_RESULTS
    from tasks.lm import LoglikelihoodRequest
    from tasks.metrics import get
    from tasks.metrics.oracle_cells import oracle_family
    from tasks.metrics.resources import build_resources
    from tasks.stages.score.inputs import load_inputs

    cfg = load_config(Path("pipelines.toml")).for_pipeline(pipeline)
    metrics = get(["tv_fvar_statement"])
    inputs = load_inputs(cfg, pipeline, metrics)
    negatives = pl.read_parquet(stage_dir(cfg, pipeline, "score") / "negatives.parquet")
    asked: list[tuple[str, str]] = []

    def record(frame: pl.DataFrame) -> pl.DataFrame:
        asked.extend(frame.select("system", "user").iter_rows())
        return pl.DataFrame({"key": frame["key"], "p_yes": [0.5] * frame.height, "p_no": [0.5] * frame.height},
                            schema=ORACLE_RESULTS)
    resources = dataclasses.replace(build_resources(cfg.score), readout=record)
    oracle_family(metrics, inputs.candidates, inputs.references, negatives, inputs.synopses, resources)
    return [LoglikelihoodRequest(s, u, a) for s, u in asked for a in ("Yes", "No")]


def judge_requests(pipeline: str):
    """The llm_judge's questions in the score stage (synopsis, the paper's other human reviews, the candidate),
    each with the 0-10 answers its rating is read from."""
    from unittest import mock

    from tasks.core.config import load_config
    from tasks.lm import LoglikelihoodRequest
    from tasks.metrics import get, rating
    from tasks.metrics.judge import judge_family
    from tasks.metrics.resources import build_resources
    from tasks.stages.score.inputs import load_inputs

    cfg = load_config(Path("pipelines.toml")).for_pipeline(pipeline)
    metrics = get(["llm_judge"])
    inputs = load_inputs(cfg, pipeline, metrics)
    asked: list[tuple[str, str]] = []

    def record(resources, questions, purpose, max_tokens, analysis):
        asked.extend(questions.values())
        return {key: float("nan") for key in questions}, "recorded"
    with mock.patch.object(rating, "rate_panel", record):
        judge_family(metrics, inputs.candidates, inputs.references, None, inputs.synopses, build_resources(cfg.score))
    return [LoglikelihoodRequest(s, u, f"{rating.RATING_PREFILL} {n}") for s, u in asked for n in rating.SCALE]


def gem_requests(pipeline: str):
    from tasks.lm import LoglikelihoodRequest

    frames = [pl.read_parquet(p) for p in sorted(Path(f"data/{pipeline}/score/requests").glob("*.parquet"))]
    return [LoglikelihoodRequest(*r) for r in pl.concat(frames).select("system", "user", "continuation").iter_rows()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="2212908", help="git revision of the engine to compare with")
    parser.add_argument("--pipeline", default="demo")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", choices=["readout", "judge", "gem"], help="one workload only")
    parser.add_argument("--after-only", action="store_true", help="this tree's engine alone")
    parser.add_argument("--row-max", type=int, help="this tree's ROW_MAX (tokens of a row of several prompts)")
    parser.add_argument("--token-budget", type=int, default=4096, help="tokens per forward batch (both engines)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from tasks.lm import ModelSpec, flat_attention, loglikelihood
    from tasks.lm.local import LocalLM

    LoglikelihoodEngine = _own_attention(loglikelihood.LoglikelihoodEngine, flat_attention)

    if args.row_max:
        loglikelihood.ROW_MAX = args.row_max

    lm = LocalLM(ModelSpec(), token_budget=args.token_budget)
    model, tokenizer = lm.engine.model, lm.engine.tokenizer
    Old = None if args.after_only else old_engine_class(args.before)
    out = {}
    workloads = {"readout": readout_requests, "judge": judge_requests, "gem": gem_requests}
    for name in [args.only] if args.only else list(workloads):
        requests = workloads[name](args.pipeline)
        row = {"requests": len(requests)}
        results = {}
        engines = (("before", Old), ("after", LoglikelihoodEngine))
        for label, cls in engines[1:] if args.after_only else engines:
            engine = cls(model, tokenizer, token_budget=args.token_budget)
            started = time.process_time()
            results[label] = engine.score(requests)
            row[f"cpu_s_{label}"] = round(time.process_time() - started, 1)
            row[f"forward_tokens_{label}"] = engine.stats.forward_tokens
            row[f"padded_tokens_{label}"] = engine.stats.padded_tokens
        if not args.after_only:
            row["cpu_ratio"] = round(row["cpu_s_before"] / row["cpu_s_after"], 2)
            row["max_diff_nats"] = max(abs(a.logprob - b.logprob)
                                       for a, b in zip(results["before"], results["after"], strict=True))
        print(name, row, flush=True)
        out[name] = row
    print(json.dumps(out))


if __name__ == "__main__":
    main()
