-- Papers the contamination guard kept from a candidate (public on or before its knowledge cutoff).
-- source: generate/exclusions.parquet
CREATE OR REPLACE TABLE staging.exclusions AS
SELECT * FROM read_parquet($files, union_by_name = true);
