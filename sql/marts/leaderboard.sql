-- GRE-bench leaderboard (GEM paper section 5): each model's mean score over papers with its CI
-- (90% by default), the human baseline as the row with is_human, ranked within metric and eval LM;
-- predictor: the model behind the column (logprobs:/readout:/generate:/judge:/embedding: <model>, or none;
-- a judge's as judge:<readout|generate>:<backend>/<model>); qualified: false where a judging model behind the
-- column failed the qualification exam ("not qualified", with on_fail = "report"), null without an exam;
-- note: what the numbers rest on (pairs an estimator lost, an ASSW written from the abstract, the exam).
-- kind: human, generated or submitted (`grebench submit`). rank_low..rank_high: the rank interval from
-- a bootstrap over papers; tied_with: the neighbours on the board whose paired difference from this
-- model is not significant (`comparisons`); release_id: the release the scores belong to (`releases`).
-- mean_unflagged: the same mean with the references flagged as likely AI-written (`reference_flags`)
-- left out: a score against one reference is dropped when that reference is flagged; a score read against
-- all the paper's references at once (reference null, a metric that reads references: an LLM judge, review
-- quality's matches) is dropped when any reference it read (the paper's others) is flagged, so no number of
-- this board comes from reading a flagged one; a reference-free score (the registry's reads_references false,
-- passed as $reference_free_metrics) stays. The f-variational metrics (the registry's negatives, passed as
-- $negative_metrics) also read other papers' reviews as negatives (staging.negatives, drawn per pair): a pair
-- score whose negatives hold a flagged reference is dropped too. flagged_shift: mean_unflagged minus the mean
-- over all references. n_flagged: the flagged references among those the row's scores read, as references or
-- as negatives. The three are NULL with
-- `unflagged_reason` saying why when nothing was measured: no reference flags in this pipeline, or none of
-- the references could be judged (Binoculars without a calibrated threshold leaves every flag null); a
-- reference whose flag is null counts as not flagged and `unflagged_reason` says how many there were.
-- Every mean adds its values in a fixed order (ORDER BY inside the aggregate): parallel threads would
-- otherwise add them in the order they finish, and two recomputations of the same scores would differ in
-- the last bits.
-- requires: staging.leaderboard
CREATE OR REPLACE TABLE leaderboard AS
WITH flags AS (
    SELECT paper_id, review_id, flagged, reason FROM staging.reference_flags
), measured AS (
    SELECT count(*) AS n_flags, count(*) FILTER (flagged IS NOT NULL) AS n_measured,
           string_agg(DISTINCT reason, ', ' ORDER BY reason) FILTER (flagged IS NULL) AS why_not
    FROM flags
), pairs AS (
    SELECT s.metric, s.eval_lm, s.source AS model, s.paper_id, s.candidate, s.reference, s.score,
           CASE WHEN s.reference IS NOT NULL
                THEN coalesce(f.flagged, false) OR (list_contains($negative_metrics, s.metric) AND EXISTS (
                    SELECT 1 FROM staging.negatives AS n JOIN flags AS o ON o.review_id = n.negative
                    WHERE n.candidate = s.candidate AND n.reference = s.reference AND o.flagged))
                WHEN list_contains($reference_free_metrics, s.metric) THEN false
                ELSE EXISTS (SELECT 1 FROM flags AS o
                             WHERE o.paper_id = s.paper_id AND o.flagged AND o.review_id <> s.candidate) END AS flagged,
           s.reference IS NOT NULL AND f.review_id IS NOT NULL AND f.flagged IS NULL AS unmeasured
    FROM staging.scores AS s
    LEFT JOIN flags AS f ON f.review_id = s.reference
    WHERE s.score IS NOT NULL AND NOT isnan(s.score)
), per_candidate AS (
    SELECT metric, eval_lm, model, paper_id, candidate,
           avg(score ORDER BY reference, score) AS score_all,
           avg(score ORDER BY reference, score) FILTER (NOT flagged) AS score_unflagged
    FROM pairs GROUP BY ALL
), per_paper AS (
    SELECT metric, eval_lm, model, paper_id, avg(score_all ORDER BY candidate) AS score_all,
           avg(score_unflagged ORDER BY candidate) AS score_unflagged
    FROM per_candidate GROUP BY ALL
), shifts AS (
    SELECT metric, eval_lm, model,
           avg(score_unflagged ORDER BY paper_id) AS mean_unflagged,
           avg(score_unflagged ORDER BY paper_id) - avg(score_all ORDER BY paper_id) AS flagged_shift
    FROM per_paper GROUP BY ALL
), read_flagged AS (   -- the flagged references each row's scores read: one at a time, all at once, or as negatives
    SELECT p.metric, p.eval_lm, p.model, f.review_id
    FROM pairs AS p JOIN flags AS f ON f.review_id = p.reference WHERE f.flagged
    UNION
    SELECT p.metric, p.eval_lm, p.model, f.review_id
    FROM pairs AS p JOIN flags AS f ON f.paper_id = p.paper_id AND f.review_id <> p.candidate
    WHERE p.reference IS NULL AND NOT list_contains($reference_free_metrics, p.metric) AND f.flagged
    UNION
    SELECT p.metric, p.eval_lm, p.model, f.review_id
    FROM pairs AS p JOIN staging.negatives AS n ON n.candidate = p.candidate AND n.reference = p.reference
    JOIN flags AS f ON f.review_id = n.negative
    WHERE list_contains($negative_metrics, p.metric) AND f.flagged
), counts AS (
    SELECT p.metric, p.eval_lm, p.model,
           (SELECT count(DISTINCT r.review_id) FROM read_flagged AS r
            WHERE r.metric = p.metric AND r.eval_lm IS NOT DISTINCT FROM p.eval_lm AND r.model = p.model) AS n_flagged,
           count(DISTINCT p.reference) FILTER (p.unmeasured) AS n_unmeasured
    FROM pairs AS p GROUP BY ALL
)
SELECT l.metric, l.eval_lm, l.rank, l.rank_low, l.rank_high, l.model, l.kind, l.is_human, l.mean, l.ci_low, l.ci_high,
       l.confidence, l.n_papers, l.n_missing, l.n_excluded, l.tied_with, l.reason, l.predictor, l.qualified, l.note,
       l.release_id,
       CASE WHEN m.n_measured > 0 THEN s.mean_unflagged END AS mean_unflagged,
       CASE WHEN m.n_measured > 0 THEN s.flagged_shift END AS flagged_shift,
       CASE WHEN m.n_measured > 0 THEN coalesce(c.n_flagged, 0) END AS n_flagged,
       CASE WHEN m.n_flags = 0 THEN 'not measured: no reference was scored for AI-likelihood (reference flags off)'
            WHEN m.n_measured = 0 THEN 'not measured: no reference could be flagged (' || coalesce(m.why_not, 'no reason') || ')'
            WHEN coalesce(c.n_unmeasured, 0) > 0
                THEN c.n_unmeasured || ' reference(s) read without a flag (' || coalesce(m.why_not, 'no reason') || '): counted as not flagged'
       END AS unflagged_reason
FROM staging.leaderboard AS l
CROSS JOIN measured AS m
LEFT JOIN shifts AS s USING (metric, eval_lm, model)
LEFT JOIN counts AS c USING (metric, eval_lm, model)
ORDER BY l.metric, l.eval_lm, l.rank NULLS LAST, l.model;
