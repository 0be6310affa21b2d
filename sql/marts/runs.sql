-- Pipeline runs, stage by stage: duration, rows in / out, LLM calls, tokens and cost.
-- requires: staging.runs
CREATE OR REPLACE TABLE runs AS
SELECT
    run_id, pipeline, config_hash, code_version, position, stage, status,
    started_at, ended_at, duration_s, rows_in, rows_out,
    llm_calls, input_tokens, output_tokens, cost_usd, error
FROM staging.runs
ORDER BY started_at, position;
