-- Candidate reviews written by the configured LLMs (generate stage), one per (model, paper).
-- source: generate/candidates.parquet
CREATE OR REPLACE TABLE staging.candidates AS
SELECT * FROM read_parquet($files, union_by_name = true);
