-- The pipeline's releases (tasks/stages/validate/releases.py), one file per release id.
-- source: releases/*.parquet
CREATE OR REPLACE TABLE staging.releases AS
SELECT * FROM read_parquet($files, union_by_name = true);
