-- Per metric, how strongly the score of the original candidates follows their length in words
-- (Spearman's rho, two-sided p), per evaluation LM. A rho near +-1 means padding alone could move the metric.
-- requires: staging.length_confound
CREATE OR REPLACE TABLE length_confound AS
SELECT metric, eval_lm, n, n_dropped, rho, p_value, mean_words, reason
FROM staging.length_confound
ORDER BY abs(rho) DESC NULLS LAST, metric, eval_lm;
