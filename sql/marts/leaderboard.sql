-- GRE-bench leaderboard (GEM paper section 5): each model's mean score over papers with its CI
-- (90% by default), the human baseline as the row with is_human, ranked within metric and eval LM;
-- predictor: the model behind the column (logprobs:/readout:/generate:/judge:/embedding: <model>, or none;
-- a judge's as judge:<readout|generate>:<backend>/<model>); qualified: false where a judging model behind the
-- column failed the qualification exam ("not qualified", with on_fail = "report"), null without an exam;
-- note: what the numbers rest on (pairs an estimator lost, an ASSW written from the abstract, the exam).
-- kind: human, generated or submitted (`grebench submit`). rank_low..rank_high: the rank interval from
-- a bootstrap over papers; tied_with: the neighbours on the board whose paired difference from this
-- model is not significant (`comparisons`); release_id: the release the scores belong to (`releases`).
-- requires: staging.leaderboard
CREATE OR REPLACE TABLE leaderboard AS
SELECT metric, eval_lm, rank, rank_low, rank_high, model, kind, is_human, mean, ci_low, ci_high, confidence,
       n_papers, n_missing, n_excluded, tied_with, reason, predictor, qualified, note, release_id
FROM staging.leaderboard
ORDER BY metric, eval_lm, rank NULLS LAST, model;
