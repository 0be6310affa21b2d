-- What each venue's source cannot give (e.g. private rejected papers): read beside curation_report.
-- requires: staging.source_limits
CREATE OR REPLACE TABLE source_limits AS
SELECT venue_id, "limit"
FROM staging.source_limits
ORDER BY venue_id, "limit";
