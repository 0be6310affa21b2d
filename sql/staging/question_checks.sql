-- Review-quality work of the score stage (tasks/metrics/review_quality): question_checks.
-- source: score/question_checks.parquet
CREATE OR REPLACE TABLE staging.question_checks AS
SELECT * FROM read_parquet($files, union_by_name = true);
