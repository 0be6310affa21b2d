-- Positional bias of each pairwise judge (Auto-PRE's consistency test, RevisEval's position swap): of
-- the pairs answered in both orders, the share whose verdict flips with the order; of the verdicts that
-- name a winner, the share that went to the review shown first (0.5: no preference for a position).
-- NULL with a reason where nothing was answered.
-- requires: pairwise
CREATE OR REPLACE TABLE pairwise_bias AS
WITH firsts AS (
    SELECT judge, verdict_a_first = 'a' AS first_won FROM pairwise WHERE verdict_a_first IN ('a', 'b')
    UNION ALL
    SELECT judge, verdict_b_first = 'b' FROM pairwise WHERE verdict_b_first IN ('a', 'b')
), pairs AS (
    SELECT judge, count(*) AS pairs,
           count(*) FILTER (WHERE flipped IS NOT NULL) AS answered_both,
           count(*) FILTER (WHERE flipped) AS flipped
    FROM pairwise
    GROUP BY judge
), positions AS (
    SELECT judge, count(*) AS decided, avg(first_won::DOUBLE) AS first_position_share FROM firsts GROUP BY judge
)
SELECT pairs.judge, pairs.pairs, pairs.answered_both, pairs.flipped,
       CASE WHEN pairs.answered_both > 0 THEN pairs.flipped / pairs.answered_both END AS flip_rate,
       coalesce(positions.decided, 0) AS decided, positions.first_position_share,
       CASE WHEN pairs.answered_both = 0 THEN 'no pair answered in both orders' END AS reason
FROM pairs LEFT JOIN positions USING (judge)
ORDER BY pairs.judge;
