-- The qualification exam of the LLMs in a judging role (qualify stage, Auto-PRE).
-- source: qualify/qualification.parquet
CREATE OR REPLACE TABLE staging.qualification AS
SELECT * FROM read_parquet($files, union_by_name = true);
