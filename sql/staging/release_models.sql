-- The models of each release (tasks/stages/validate/releases.py `record_release`), one file per release id.
-- source: releases/models/*.parquet
-- empty: release_id VARCHAR, model VARCHAR, added_at TIMESTAMP WITH TIME ZONE
CREATE OR REPLACE TABLE staging.release_models AS
SELECT * FROM read_parquet($files, union_by_name = true);
