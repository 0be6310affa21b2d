-- The negative references each (candidate, reference) pair of an f-variational metric read: reviews of other
-- papers drawn per pair (tasks/metrics/negatives.py); the leaderboard keeps a flagged one off its unflagged board.
-- source: score/negatives.parquet
-- empty: paper_id VARCHAR, candidate VARCHAR, reference VARCHAR, draw BIGINT, negative VARCHAR, negative_paper VARCHAR
CREATE OR REPLACE TABLE staging.negatives AS
SELECT * FROM read_parquet($files, union_by_name = true);
