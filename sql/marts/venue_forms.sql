-- The review form each venue was read with: its venue table in pipelines.toml ("pipelines.toml"),
-- or the official-review invitation ingest read it from, with the options and the rating mapping
-- (tasks/stages/ingest/review_form.py; docs/openreview.md "Review forms read from the venue").
-- requires: staging.venue_forms
CREATE OR REPLACE TABLE venue_forms AS
SELECT venue_id, api_version, source, rule, rating_field, confidence_field,
       rating_options, rating_map, confidence_options
FROM staging.venue_forms
ORDER BY venue_id;
