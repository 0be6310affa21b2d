-- Papers the contamination guard kept from a candidate (public on or before its knowledge cutoff),
-- for generated candidates and submitted ones (their declared cutoff).
-- source: generate/exclusions.parquet submit/*/submitted_exclusions.parquet
CREATE OR REPLACE TABLE staging.exclusions AS
SELECT * EXCLUDE (filename),
       CASE WHEN ends_with(filename, 'submitted_exclusions.parquet') THEN 'submitted' ELSE 'generated' END AS origin
FROM read_parquet($files, union_by_name = true, filename = true);
