-- Every ingested submission of the pipeline's venues (withdrawn and desk-rejected included).
-- source: */ingest/papers.parquet
CREATE OR REPLACE TABLE staging.ingested_papers AS
SELECT * FROM read_parquet($files, union_by_name = true);
