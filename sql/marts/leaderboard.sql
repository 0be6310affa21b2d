-- GRE-bench leaderboard (GEM paper section 5): each model's mean score over papers with its CI
-- (90% by default), the human baseline as the row with is_human, ranked within metric and eval LM;
-- predictor: the model behind the column (logprobs:/readout:/generate:/judge:/embedding: <model>, or none;
-- a judge's as judge:<readout|generate>:<backend>/<model>); qualified: false where a judging model behind the
-- column failed the qualification exam ("not qualified", with on_fail = "report"), null without an exam;
-- note: what the numbers rest on (pairs an estimator lost, an ASSW written from the abstract, the exam).
-- requires: staging.leaderboard
CREATE OR REPLACE TABLE leaderboard AS
SELECT metric, eval_lm, rank, model, is_human, mean, ci_low, ci_high, confidence, n_papers, n_missing,
       n_excluded, reason, predictor, qualified, note
FROM staging.leaderboard
ORDER BY metric, eval_lm, rank NULLS LAST, model;
