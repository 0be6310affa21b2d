-- A curated rating off the common scale (the scale is bound as $scale).
-- requires: reviews
SELECT review_id, rating FROM reviews WHERE NOT list_contains($scale, rating);
