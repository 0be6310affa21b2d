-- How much two evaluation LMs agree on the ordering of the models (Spearman's rho over the models both rank, the
-- human row apart: GEM section 4.4's cross-LM consistency).
-- requires: staging.leaderboard_agreement
CREATE OR REPLACE TABLE leaderboard_agreement AS
SELECT metric, eval_lm_a, eval_lm_b, n_models, rho, p_value, reason
FROM staging.leaderboard_agreement
ORDER BY metric, eval_lm_a, eval_lm_b;
