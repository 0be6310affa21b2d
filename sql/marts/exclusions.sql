-- Contamination guard: the papers each candidate was kept away from, and why (origin: generated
-- or submitted).
-- requires: staging.exclusions
CREATE OR REPLACE TABLE exclusions AS
SELECT paper_id, venue_id, model, origin, first_public_at, date_source, knowledge_cutoff, reason
FROM staging.exclusions
ORDER BY model, venue_id, paper_id;
