-- On its selection papers the adversary accepts a step only when it raises the metric's mean there, so the
-- recipe's mean inflation over the selection part is never negative: a negative one means the search or its
-- bookkeeping is wrong. (The test part may fall: that is what makes its significance test honest.)
-- requires: staging.adversary
SELECT metric, eval_lm, avg(inflation) AS selection_mean_inflation
FROM staging.adversary
WHERE split = 'selection' AND inflation IS NOT NULL AND NOT isnan(inflation)
GROUP BY ALL
HAVING avg(inflation) < -1e-9;
