-- source: */curate/reviews.parquet
CREATE OR REPLACE TABLE staging.curated_reviews AS
SELECT * FROM read_parquet($files, union_by_name = true);
