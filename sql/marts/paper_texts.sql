-- Text extracted from the PDFs of curated papers (references, appendices and acknowledgements
-- removed; a second column also without the related-work section).
-- requires: staging.pdf_texts, staging.curated_papers
CREATE OR REPLACE TABLE paper_texts AS
SELECT t.*
FROM staging.pdf_texts AS t
SEMI JOIN staging.curated_papers USING (paper_id)
ORDER BY paper_id;
