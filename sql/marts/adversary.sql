-- Per metric, the adversary's recipe (generic praise or critique, duplication, reordering, deletion, an
-- injected instruction) chosen on the selection papers, and what it did to the test papers, which the
-- search never saw: the mean and largest inflation there, and how many test candidates it raised. The
-- selection part's mean is what the search found (optimistic by construction); the significance test is
-- the `adversary` row of the validation table, on the test part only. One row per metric and evaluation LM.
-- requires: staging.adversary
CREATE OR REPLACE TABLE adversary AS
SELECT metric,
       eval_lm,
       any_value(target) AS target,
       any_value(edits) AS recipe,
       count(*) FILTER (split = 'selection') AS selection_candidates,
       count(*) FILTER (split = 'test') AS test_candidates,
       avg(inflation) FILTER (split = 'selection') AS selection_mean_inflation,
       avg(inflation) FILTER (split = 'test') AS test_mean_inflation,
       max(inflation) FILTER (split = 'test') AS test_largest_inflation,
       count(*) FILTER (split = 'test' AND inflation > 0) AS test_candidates_inflated,
       arg_max(candidate, inflation) FILTER (split = 'test') AS most_inflated_test_candidate,
       sum(variants_scored) AS variants_scored
FROM staging.adversary
GROUP BY ALL
ORDER BY test_mean_inflation DESC NULLS LAST, metric, eval_lm;
