-- Hidden text found in the ingested PDFs (tasks/stages/ingest/pdf.py hidden_spans).
-- source: */ingest/paper_integrity.parquet
CREATE OR REPLACE TABLE staging.paper_integrity AS
SELECT * FROM read_parquet($files, union_by_name = true);
