-- source: */ingest/pdf_texts.parquet
CREATE OR REPLACE TABLE staging.pdf_texts AS
SELECT * FROM read_parquet($files, union_by_name = true);
