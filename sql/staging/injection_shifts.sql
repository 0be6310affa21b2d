-- How far a planted instruction moved each candidate (tasks/stages/score/injection.py).
-- source: score/injection_shifts.parquet
-- empty: model VARCHAR, variant VARCHAR, measure VARCHAR, eval_lm VARCHAR, n_papers BIGINT, shift DOUBLE, ci_low DOUBLE, ci_high DOUBLE, confidence DOUBLE, reason VARCHAR
CREATE OR REPLACE TABLE staging.injection_shifts AS
SELECT * FROM read_parquet($files, union_by_name = true);
