-- Review-quality work of the score stage (tasks/metrics/review_quality): points.
-- source: score/points.parquet
-- empty: review_id VARCHAR, paper_id VARCHAR, source VARCHAR, field VARCHAR, position INTEGER, category VARCHAR, kind VARCHAR, text VARCHAR, split_from VARCHAR, model VARCHAR, prompt_version VARCHAR
CREATE OR REPLACE TABLE staging.points AS
SELECT * FROM read_parquet($files, union_by_name = true);
