-- What screening found in submitted reviews (tasks/stages/generate/screening.py).
-- source: submit/*/submission_flags.parquet
CREATE OR REPLACE TABLE staging.submission_flags AS
SELECT * FROM read_parquet($files, union_by_name = true);
