"""Score: every configured metric of every candidate against the human references.

The log-likelihoods of the lm_logprobs metrics (GEM) go through Parquet shards, one Prefect task
per shard (`.map`) on the configured task runner, behind the evaluation-LM concurrency limit;
finished shards are skipped, so a crashed run resumes. With several evaluation LMs
(`[score] eval_lms`) those metrics are scored once per evaluation LM (tasks/scoring/eval_lms.py).
"""

from __future__ import annotations

from prefect import flow

from tasks.config import Config
from tasks.layout import cache_dir
from tasks.qualify.stage import qualified_config
from tasks.review_quality.stage import quality_work, write_quality_tables
from tasks.scoring.fanout import fan_out
from tasks.scoring.shards import CONCURRENCY_LIMIT, ensure_concurrency_limit
from tasks.scoring.stage import score_inputs_each_eval_lm, sharded_loglikelihoods, shards_details
from tasks.scoring.steps import read_inputs_task, write_scores_task
from tasks.summary import StageSummary


@flow(name="score", log_prints=True)
def score_flow(cfg: Config, pipeline: str) -> StageSummary:
    cfg = qualified_config(cfg, pipeline)   # the judges that passed the qualify stage, when it runs
    inputs = read_inputs_task(cfg, pipeline)
    ensure_concurrency_limit(CONCURRENCY_LIMIT, cfg.score.gpu_concurrency)
    shards = sharded_loglikelihoods(cfg, pipeline, run=fan_out(cfg.score))   # one per evaluation LM
    # called in the flow itself: the shard fan-out it triggers is a subflow of this one
    quality = quality_work(cfg, pipeline, cache_dir(cfg, "llm"), cfg.score.all_metrics)   # None: no such metric
    scores, log = score_inputs_each_eval_lm(cfg, inputs, shards, llm_cache=cache_dir(cfg, "llm"), quality=quality)
    details = {**shards_details(shards), **write_quality_tables(cfg, pipeline, quality)}
    summary = write_scores_task(cfg, pipeline, scores, details, inputs.negatives, log)
    print(f"score {pipeline}: {summary.as_dict()}")
    return summary
