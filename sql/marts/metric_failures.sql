-- Per metric and evaluation LM, in the shape of the Scoring Rules paper's tables 4 and 5: how many
-- degradation tests it fails (no significant drop) and how many manipulation tests it fails
-- (a significant rise), out of the tests that reached a verdict, with the failed strategies named
-- (a level other than the judgment lines is written beside the strategy). Every validated metric has
-- a row, also one that fails nothing; inconclusive tests (too few pairs) are counted apart.
-- tasks/report/validation.py `metric_failures` computes the same table for `grebench report`.
-- requires: staging.validation
CREATE OR REPLACE VIEW metric_failures AS
WITH tests AS (
    SELECT metric, coalesce(eval_lm, '') AS eval_lm, kind, passed,
           strategy || CASE WHEN level IS NULL OR level = 'judgments' THEN '' ELSE ' (' || level || ')' END AS test
    FROM staging.validation
)
SELECT metric, eval_lm,
       count(*) FILTER (kind = 'degradation' AND NOT passed) AS degradations_failed,
       count(*) FILTER (kind = 'degradation' AND passed IS NOT NULL) AS degradations_tested,
       count(*) FILTER (kind = 'degradation' AND passed IS NULL) AS degradations_inconclusive,
       coalesce(list(test ORDER BY test) FILTER (kind = 'degradation' AND NOT passed), []) AS failed_degradations,
       count(*) FILTER (kind = 'manipulation' AND NOT passed) AS manipulations_failed,
       count(*) FILTER (kind = 'manipulation' AND passed IS NOT NULL) AS manipulations_tested,
       count(*) FILTER (kind = 'manipulation' AND passed IS NULL) AS manipulations_inconclusive,
       coalesce(list(test ORDER BY test) FILTER (kind = 'manipulation' AND NOT passed), []) AS failed_manipulations
FROM tests
GROUP BY ALL
ORDER BY degradations_failed + manipulations_failed, metric, eval_lm;
