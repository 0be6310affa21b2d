-- One row per stage of every pipeline run (see tasks/core/runs.py).
-- source: runs/*.parquet
CREATE OR REPLACE TABLE staging.runs AS
SELECT * FROM read_parquet($files, union_by_name = true);
