-- A curated review id appears more than once.
-- requires: reviews
SELECT review_id, count(*) AS n FROM reviews GROUP BY ALL HAVING n > 1;
