-- Spearman agreement between the leaderboards of two evaluation LMs, per metric.
-- source: validate/leaderboard_agreement.parquet
CREATE OR REPLACE TABLE staging.leaderboard_agreement AS
SELECT * FROM read_parquet($files, union_by_name = true);
