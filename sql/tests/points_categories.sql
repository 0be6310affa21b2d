-- A point outside the eight categories, a question without a kind, or a match that is not 0 / 1.
-- requires: points, point_matches
SELECT review_id AS id, field, category AS value
FROM points
WHERE category NOT IN ('Novelty', 'Soundness', 'Experiments', 'Clarity', 'Significance', 'Reproducibility',
                       'Related Work', 'Other')
   OR (field = 'questions' AND kind NOT IN ('Explain', 'Supplement', 'Other'))
   OR (field = 'questions' AND kind IS NULL)
UNION ALL
SELECT candidate, field, CAST(match AS VARCHAR)
FROM point_matches
WHERE match NOT IN (0, 1) OR (match IS NULL AND reason IS NULL);
