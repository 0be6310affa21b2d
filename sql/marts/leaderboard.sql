-- GRE-bench leaderboard (GEM paper section 5): each model's mean score over papers with its CI
-- (90% by default), the human baseline as the row with is_human, ranked within metric and eval LM;
-- predictor: the model behind the column (logprobs:/readout:/generate:/judge:/embedding: <model>, or none).
-- kind: human, generated or submitted (`grebench submit`). rank_low..rank_high: the rank interval from
-- a bootstrap over papers; tied_with: the neighbours on the board whose paired difference from this
-- model is not significant (`comparisons`); release_id: the release the scores belong to (`releases`).
-- requires: staging.leaderboard
CREATE OR REPLACE TABLE leaderboard AS
SELECT metric, eval_lm, rank, rank_low, rank_high, model, kind, is_human, mean, ci_low, ci_high, confidence,
       n_papers, n_missing, n_excluded, tied_with, reason, predictor, release_id
FROM staging.leaderboard
ORDER BY metric, eval_lm, rank NULLS LAST, model;
