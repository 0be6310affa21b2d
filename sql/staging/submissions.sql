-- One row per submission (`grebench submit`): the file, the declared cutoff and where its rows went.
-- source: submit/*/submission.parquet
-- empty: name VARCHAR, pipeline VARCHAR, file VARCHAR, file_sha256 VARCHAR, format VARCHAR, knowledge_cutoff DATE, submitted_at TIMESTAMP WITH TIME ZONE, model VARCHAR, rows_in BIGINT, accepted BIGINT, excluded BIGINT, rejected BIGINT, benchmark_papers BIGINT, missing BIGINT, replaced BOOLEAN, flagged BIGINT
CREATE OR REPLACE TABLE staging.submissions AS
SELECT * FROM read_parquet($files, union_by_name = true);
