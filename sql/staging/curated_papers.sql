-- source: */curate/papers.parquet
CREATE OR REPLACE TABLE staging.curated_papers AS
SELECT * FROM read_parquet($files, union_by_name = true);
