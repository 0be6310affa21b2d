-- Per-paper synopses: the abstract and the authors' own strengths / weaknesses (ASSW).
-- source: preprocess/synopses.parquet
CREATE OR REPLACE TABLE staging.synopses AS
SELECT * FROM read_parquet($files, union_by_name = true);
