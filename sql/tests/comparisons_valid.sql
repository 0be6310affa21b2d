-- Paired comparisons make sense: two different models, an interval around the mean difference, a
-- corrected p-value no smaller than the raw one and both in [0, 1], a winner only when significant.
-- requires: comparisons
SELECT metric, eval_lm, model_a, model_b, mean_diff, ci_low, ci_high, p_value, p_adjusted, significant, better
FROM comparisons
WHERE model_a = model_b
   OR (NOT isnan(ci_low) AND NOT (ci_low <= mean_diff + 1e-9 AND mean_diff <= ci_high + 1e-9))
   OR (NOT isnan(p_value) AND (p_value < 0 OR p_value > 1 OR p_adjusted < p_value - 1e-12 OR p_adjusted > 1))
   OR (better IS NOT NULL AND (NOT significant OR better NOT IN (model_a, model_b)))
   OR (significant AND better IS NULL);
