-- source: */curate/source_limits.parquet
-- empty: venue_id VARCHAR, "limit" VARCHAR
CREATE OR REPLACE TABLE staging.source_limits AS
SELECT * FROM read_parquet($files, union_by_name = true);
