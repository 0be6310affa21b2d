-- One row per (paper, candidate, reference, metric): the score and the two log-probabilities it
-- comes from (conditional log p(y | x, synopsis) and marginal log p(y | synopsis)); `reason`
-- says why a score is NaN (e.g. no ASSW synopsis for the paper), or, beside a finite score, that a
-- text was cut to fit the evaluation LM (`truncated`; tasks/lm/fitting.py); `note` where a valid
-- score came from when it matters (assw_from_abstract: gem_s_assw on an ASSW written from the
-- abstract, no PDF text).
-- requires: staging.scores
CREATE OR REPLACE TABLE scores AS
SELECT paper_id, candidate, source, reference, metric, score, logp_conditional, logp_marginal,
       n_tokens, eval_lm, reason, coalesce(starts_with(reason, 'truncated'), false) AS truncated, note
FROM staging.scores
ORDER BY metric, paper_id, candidate, reference;
