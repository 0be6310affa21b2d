-- Every ingested official review, normalised to one schema; no reviewer identity.
-- source: */ingest/reviews.parquet
CREATE OR REPLACE TABLE staging.ingested_reviews AS
SELECT * FROM read_parquet($files, union_by_name = true);
