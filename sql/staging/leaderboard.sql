-- GRE-bench leaderboard rows: per metric, evaluation LM and model, the mean over papers with its CI.
-- source: validate/leaderboard.parquet
CREATE OR REPLACE TABLE staging.leaderboard AS
SELECT * FROM read_parquet($files, union_by_name = true);
