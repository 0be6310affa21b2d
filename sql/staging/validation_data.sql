-- Which reviews the validate stage tested the metrics on, and their provenance.
-- source: validate/validation_data.parquet
CREATE OR REPLACE TABLE staging.validation_data AS
SELECT * FROM read_parquet($files, union_by_name = true);
