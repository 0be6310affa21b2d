-- One row per submission (`grebench submit`): the file, the declared cutoff and where its rows went.
-- source: submit/*/submission.parquet
CREATE OR REPLACE TABLE staging.submissions AS
SELECT * FROM read_parquet($files, union_by_name = true);
