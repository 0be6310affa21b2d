-- LLM usage per stage (taken from the folder the usage file sits in).
-- requires: staging.llm_usage
CREATE OR REPLACE TABLE llm_usage AS
SELECT regexp_extract(filename, '([^/]+)/usage\.parquet$', 1) AS stage, * EXCLUDE (filename)
FROM staging.llm_usage;
