-- Spearman's rho (two-sided p) between each metric's scores of human reviews and their quality scores.
-- requires: staging.human_correlation
CREATE OR REPLACE TABLE human_correlation AS
SELECT metric, eval_lm, n, n_dropped, rho, p_value, reason
FROM staging.human_correlation
ORDER BY rho DESC NULLS LAST, metric;
