-- Per metric, how far the adversary's edits (generic praise or critique, duplication, reordering,
-- deletion, an injected instruction) raised the score: the largest and mean inflation over
-- candidates and the edits behind the largest. The significance test is the `adversary` row of
-- the validation table. One row per metric and evaluation LM (`eval_lm`).
-- requires: staging.adversary
CREATE OR REPLACE TABLE adversary AS
SELECT metric,
       eval_lm,
       any_value(target) AS target,
       count(*) AS candidates,
       count(*) FILTER (inflation > 0) AS candidates_inflated,
       max(inflation) AS largest_inflation,
       avg(inflation) AS mean_inflation,
       max_by(candidate, inflation) AS most_inflated_candidate,
       max_by(edits, inflation) AS edits_of_largest,
       sum(variants_scored) AS variants_scored
FROM staging.adversary
GROUP BY ALL
ORDER BY largest_inflation DESC NULLS LAST, metric, eval_lm;
