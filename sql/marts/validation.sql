-- Metric validation (GEM paper section 4): per metric and strategy the paired change of the score,
-- its standardized mean difference with a 95% CI (normal approximation, and a paired bootstrap in
-- boot_low / boot_high), the one-sided paired t-test and the verdict. A degradation passes when the
-- score falls significantly; a manipulation when it does not rise. A test with fewer pairs than
-- [validate] min_pairs is "inconclusive" and its `passed` is null. `level` says what was perturbed:
-- the raw review (then preprocessed) or the judgment lines; `perturber` what perturbed it (rules, an
-- LLM's backend:model, or the adversary's search); `eval_lm` the evaluation LM; `seed` the run's seed.
-- requires: staging.validation
CREATE OR REPLACE TABLE validation AS
SELECT metric, strategy, kind, level, n, n_dropped, mean_change, smd, ci_low, ci_high, boot_low, boot_high,
       p_value, p_adjusted, passed,
       coalesce(verdict, CASE WHEN passed THEN 'pass' WHEN NOT passed THEN 'fail' ELSE 'inconclusive' END)
           AS verdict,
       reason, perturber, eval_lm, seed
FROM staging.validation
ORDER BY metric, kind, strategy, level;
