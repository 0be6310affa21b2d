-- Atomic judgments, in review order; stance is one of appreciates / criticizes / questions / suggests.
-- requires: staging.judgments
CREATE OR REPLACE TABLE judgments AS
SELECT review_id, position, stance, text, model, prompt_version
FROM staging.judgments
ORDER BY review_id, position;
