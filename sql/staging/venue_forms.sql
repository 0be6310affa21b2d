-- source: */ingest/venue_forms.parquet
CREATE OR REPLACE TABLE staging.venue_forms AS
SELECT * FROM read_parquet($files, union_by_name = true);
