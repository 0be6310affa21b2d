-- Submitted candidates: every row of the file is accepted (scored), excluded (public on or before
-- the declared cutoff) or rejected (see `rejects`, stage 'submit', entity_id '<name>#<row>');
-- missing: benchmark papers the file has no usable review of.
-- requires: staging.submissions
CREATE OR REPLACE TABLE submissions AS
SELECT name, file, format, file_sha256, knowledge_cutoff, submitted_at, model, rows_in, accepted, excluded,
       rejected, benchmark_papers, missing, replaced, flagged
FROM staging.submissions
ORDER BY name;
