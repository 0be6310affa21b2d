-- Curated reviews: confident reviews of kept papers, ratings on the common scale.
-- requires: staging.curated_reviews
CREATE OR REPLACE TABLE reviews AS
SELECT *
FROM staging.curated_reviews
ORDER BY venue_id, paper_id, review_id;
