-- Per-pair scores of every candidate against every reference, per metric (tasks/scoring).
-- source: score/scores.parquet
CREATE OR REPLACE TABLE staging.scores AS
SELECT * FROM read_parquet($files, union_by_name = true);
