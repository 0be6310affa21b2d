-- Rejects of every stage (ingest, curate, preprocess, ...), each with the rule that dropped it.
-- source: **/rejects.parquet submit/*/rejects.parquet
CREATE OR REPLACE TABLE staging.rejects AS
SELECT * FROM read_parquet($files, union_by_name = true);
