-- Every reference scored once, and `flagged` says exactly whether its finite score is below the threshold.
-- requires: reference_flags
SELECT review_id, binoculars, threshold, flagged FROM reference_flags
WHERE flagged IS DISTINCT FROM CASE WHEN binoculars IS NULL OR isnan(binoculars) THEN NULL ELSE binoculars < threshold END
   OR review_id IN (SELECT review_id FROM reference_flags GROUP BY review_id HAVING count(*) > 1);
