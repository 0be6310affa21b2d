-- The judging panel's fusion weights (qualify stage, Auto-PRE).
-- source: qualify/panel_weights.parquet
-- empty: model VARCHAR, weight DOUBLE, source VARCHAR, applied BOOLEAN
CREATE OR REPLACE TABLE staging.panel_weights AS
SELECT * FROM read_parquet($files, union_by_name = true);
