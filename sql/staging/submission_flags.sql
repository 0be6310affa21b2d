-- What screening found in submitted reviews (tasks/stages/generate/screening.py).
-- source: submit/*/submission_flags.parquet
-- empty: name VARCHAR, "row" BIGINT, paper_id VARCHAR, candidate_id VARCHAR, kind VARCHAR, detail VARCHAR
CREATE OR REPLACE TABLE staging.submission_flags AS
SELECT * FROM read_parquet($files, union_by_name = true);
