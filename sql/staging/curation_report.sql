-- source: */curate/curation_report.parquet
CREATE OR REPLACE TABLE staging.curation_report AS
SELECT * FROM read_parquet($files, union_by_name = true);
