-- How far a planted instruction moved each candidate (tasks/stages/score/injection.py).
-- source: score/injection_shifts.parquet
CREATE OR REPLACE TABLE staging.injection_shifts AS
SELECT * FROM read_parquet($files, union_by_name = true);
