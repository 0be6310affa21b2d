-- The pairwise judge of the score stage (tasks/metrics/pairwise.py): one row per pair of candidates of a
-- paper, with the verdict asked in each order.
-- source: score/pairwise.parquet
CREATE OR REPLACE TABLE staging.pairwise AS
SELECT * FROM read_parquet($files, union_by_name = true);
