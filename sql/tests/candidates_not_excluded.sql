-- A candidate reviewed a paper the contamination guard excluded for it, or a review is empty.
-- requires: candidates, exclusions
SELECT c.model, c.paper_id, 'reviewed an excluded paper' AS problem
FROM candidates AS c
JOIN exclusions AS e USING (model, paper_id)
UNION ALL
SELECT model, paper_id, 'empty review'
FROM candidates
WHERE review IS NULL OR trim(review) = '';
