-- Everything dropped or unreadable, by stage, and why.
-- requires: staging.rejects
CREATE OR REPLACE TABLE rejects AS
SELECT stage, entity, entity_id, paper_id, venue_id, rule, detail
FROM staging.rejects
ORDER BY stage, entity, rule, entity_id;
