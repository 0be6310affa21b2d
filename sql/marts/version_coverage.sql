-- Per venue: how many papers and reviews fall in each case of the versions the source gave
-- (the PDF the reviewers saw, the latest PDF of a hidden history, first and final reviews, ...).
-- requires: staging.version_coverage
CREATE OR REPLACE TABLE version_coverage AS
SELECT venue_id, entity, "case", ingested, kept
FROM staging.version_coverage
ORDER BY venue_id, entity, "case";
