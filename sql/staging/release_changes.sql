-- What changed from each release to the next (tasks/stages/validate/releases.py `changelog`).
-- source: validate/release_changes.parquet
CREATE OR REPLACE TABLE staging.release_changes AS
SELECT * FROM read_parquet($files, union_by_name = true);
