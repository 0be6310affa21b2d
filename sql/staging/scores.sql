-- Per-pair scores of every candidate against every reference, per metric (tasks/scoring).
-- source: score/scores.parquet
-- empty: paper_id VARCHAR, candidate VARCHAR, source VARCHAR, reference VARCHAR, metric VARCHAR, score DOUBLE, logp_conditional DOUBLE, logp_marginal DOUBLE, n_tokens BIGINT, eval_lm VARCHAR, reason VARCHAR, note VARCHAR
CREATE OR REPLACE TABLE staging.scores AS
SELECT * FROM read_parquet($files, union_by_name = true);
