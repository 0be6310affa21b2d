-- Metric validation (GEM paper section 4): per metric and strategy the paired change of the score,
-- its standardized mean difference with a 95% CI, the one-sided paired t-test and the verdict.
-- A degradation passes when the score falls significantly; a manipulation when it does not rise.
-- requires: staging.validation
CREATE OR REPLACE TABLE validation AS
SELECT metric, strategy, kind, n, n_dropped, mean_change, smd, ci_low, ci_high, p_value, p_adjusted,
       passed, reason
FROM staging.validation
ORDER BY metric, kind, strategy;
