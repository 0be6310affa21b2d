-- Per curation rule: rows in and rows out, in the order the rules ran.
-- requires: staging.curation_report
CREATE OR REPLACE TABLE curation_report AS
SELECT venue_id, step, rule, entity, rows_in, rows_out, rows_in - rows_out AS dropped
FROM staging.curation_report
ORDER BY venue_id, step;
