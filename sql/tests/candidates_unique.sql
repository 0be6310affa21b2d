-- A candidate review id, or a (model, paper) pair, appears more than once.
-- requires: candidates
SELECT model, paper_id, count(*) AS n, count(DISTINCT candidate_id) AS ids
FROM candidates
GROUP BY ALL
HAVING n > 1 OR ids > 1;
