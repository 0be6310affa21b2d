-- The models on each release: one row per (release, model), added when the model first reached a
-- leaderboard of that release and never rewritten, so a new model adds a row and changes none.
-- requires: staging.release_models
CREATE OR REPLACE TABLE release_models AS
SELECT release_id, model, added_at
FROM staging.release_models
ORDER BY release_id, added_at, model;
