-- LLM calls, tokens and cost of the stages that call an LLM.
-- source: */usage.parquet
CREATE OR REPLACE TABLE staging.llm_usage AS
SELECT * FROM read_parquet($files, union_by_name = true, filename = true);
