-- Binoculars AI-likelihood of every human reference (tasks/stages/score/reference_flags.py).
-- source: score/reference_flags.parquet
-- empty: paper_id VARCHAR, review_id VARCHAR, binoculars DOUBLE, threshold DOUBLE, threshold_source VARCHAR, flagged BOOLEAN, reason VARCHAR, observer VARCHAR, performer VARCHAR
CREATE OR REPLACE TABLE staging.reference_flags AS
SELECT * FROM read_parquet($files, union_by_name = true);
