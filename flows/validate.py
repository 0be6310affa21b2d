"""Validate: test every metric against degradations and manipulations, then publish the leaderboard."""

from __future__ import annotations

from prefect import flow

from tasks.config import load_config
from tasks.validate.stage import build_leaderboard_task, validate_pipeline_task, write_outputs_task


@flow(name="validate", log_prints=True)
def validate_flow(config_path: str = "pipelines.toml", pipeline: str = "demo") -> dict:
    cfg = load_config(config_path).for_pipeline(pipeline)
    result = validate_pipeline_task(cfg, pipeline)
    board, board_agreement = build_leaderboard_task(cfg, pipeline)
    write_outputs_task(cfg, pipeline, {
        "validation": result.validation,
        "human_correlation": result.human_correlation,
        "leaderboard": board,
        "leaderboard_agreement": board_agreement,
        "perturbations": result.perturbations,
        "pairs": result.pairs,
        "rejects": result.rejects,
    })
    failing = result.validation.filter(result.validation["passed"].not_())
    summary = {
        **result.stats,
        "tests": result.validation.height,
        "tests_passed": int(result.validation["passed"].sum()),
        "tests_failed": failing.height,
        "failing": [f"{m}/{s}" for m, s in failing.select("metric", "strategy").iter_rows()],
        "leaderboard_rows": board.height,
        "rejects": result.rejects.height,
    }
    print(f"validate {pipeline}: {summary}")
    return summary
