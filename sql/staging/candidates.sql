-- Candidate reviews: written by the configured LLMs (generate stage) or submitted (`grebench submit`),
-- one per (model, paper); origin says which, from the file's name.
-- source: generate/candidates.parquet submit/*/submitted_candidates.parquet
CREATE OR REPLACE TABLE staging.candidates AS
SELECT * EXCLUDE (filename),
       CASE WHEN ends_with(filename, 'submitted_candidates.parquet') THEN 'submitted' ELSE 'generated' END AS origin
FROM read_parquet($files, union_by_name = true, filename = true);
