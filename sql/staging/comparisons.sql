-- Paired comparisons of the leaderboard's models (tasks/stages/validate/comparisons.py).
-- source: validate/comparisons.parquet
CREATE OR REPLACE TABLE staging.comparisons AS
SELECT * FROM read_parquet($files, union_by_name = true);
