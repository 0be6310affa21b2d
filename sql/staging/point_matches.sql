-- Review-quality work of the score stage (tasks/metrics/review_quality): point_matches.
-- source: score/point_matches.parquet
CREATE OR REPLACE TABLE staging.point_matches AS
SELECT * FROM read_parquet($files, union_by_name = true);
