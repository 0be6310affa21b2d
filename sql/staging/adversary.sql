-- The adaptive adversary: per metric and candidate, the best score its greedy edit search found.
-- source: validate/adversary.parquet
CREATE OR REPLACE TABLE staging.adversary AS
SELECT * FROM read_parquet($files, union_by_name = true);
