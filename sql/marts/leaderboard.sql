-- GRE-bench leaderboard (GEM paper section 5): each model's mean score over papers with its CI
-- (90% by default), the human baseline as the row with is_human, ranked within metric and eval LM;
-- predictor: the model behind the column (logprobs:/readout:/generate:/judge:/embedding: <model>, or none).
-- requires: staging.leaderboard
CREATE OR REPLACE TABLE leaderboard AS
SELECT metric, eval_lm, rank, model, is_human, mean, ci_low, ci_high, confidence, n_papers, n_missing,
       n_excluded, reason, predictor
FROM staging.leaderboard
ORDER BY metric, eval_lm, rank NULLS LAST, model;
