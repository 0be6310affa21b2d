-- Review-quality work of the score stage (tasks/metrics/review_quality): points.
-- source: score/points.parquet
CREATE OR REPLACE TABLE staging.points AS
SELECT * FROM read_parquet($files, union_by_name = true);
