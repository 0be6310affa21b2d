-- Atomic judgments of the curated human reviews (tasks/judgments/extract.py).
-- source: preprocess/judgments.parquet
CREATE OR REPLACE TABLE staging.judgments AS
SELECT * FROM read_parquet($files, union_by_name = true);
