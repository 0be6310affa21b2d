-- Review-quality work of the score stage (tasks/metrics/review_quality): review_quality.
-- source: score/review_quality.parquet
-- empty: paper_id VARCHAR, candidate VARCHAR, source VARCHAR, metric VARCHAR, value DOUBLE, reason VARCHAR
CREATE OR REPLACE TABLE staging.review_quality AS
SELECT * FROM read_parquet($files, union_by_name = true);
