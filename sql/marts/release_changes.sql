-- The changelog: per release, what differs from the previous one (venues, papers, metrics,
-- eval_lms, prompts added / removed; a reference judgments or metric settings change by its hash).
-- Models are not part of a release: `release_models` lists them.
-- requires: staging.release_changes
CREATE OR REPLACE TABLE release_changes AS
SELECT release_id, previous_id, created_at, what, added, removed, detail
FROM staging.release_changes
ORDER BY created_at, release_id, what;
