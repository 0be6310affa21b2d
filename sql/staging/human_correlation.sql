-- Spearman correlation of each metric with human quality scores (empty without them).
-- source: validate/human_correlation.parquet
CREATE OR REPLACE TABLE staging.human_correlation AS
SELECT * FROM read_parquet($files, union_by_name = true);
