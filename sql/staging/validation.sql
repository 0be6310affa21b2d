-- Metric validation: one row per metric and perturbation strategy (validate stage).
-- source: validate/validation.parquet
CREATE OR REPLACE TABLE staging.validation AS
SELECT * FROM read_parquet($files, union_by_name = true);
