-- Per leaderboard (metric, eval LM) and pair of models scored on the same papers: the mean paired
-- difference model_a - model_b (model_a ranks higher), its bootstrap interval over papers, the
-- two-sided sign-flip permutation p-value and the p-value corrected across the board's pairs;
-- better: the model the metric prefers when the difference is significant (null: tied).
-- requires: staging.comparisons
CREATE OR REPLACE TABLE comparisons AS
SELECT metric, eval_lm, model_a, model_b, n_papers, mean_diff, ci_low, ci_high, confidence, p_value,
       p_adjusted, correction, significant, better, reason
FROM staging.comparisons
ORDER BY metric, eval_lm, model_a, model_b;
