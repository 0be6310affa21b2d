-- A (candidate, reference, metric, eval_lm) scored more than once.
-- requires: scores
SELECT candidate, reference, metric, eval_lm, count(*) AS n FROM scores GROUP BY ALL HAVING n > 1;
