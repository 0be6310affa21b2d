-- source: */curate/version_coverage.parquet
CREATE OR REPLACE TABLE staging.version_coverage AS
SELECT * FROM read_parquet($files, union_by_name = true);
