-- The pairwise board, beside the pointwise leaderboard: per judge and model, the pairs it took part in, its
-- win rate and a 95% Wilson interval on it. A pair is one unit: its two orders (a first, then b first) are
-- two looks at one comparison, not two independent games, so the pair scores the mean of its answered orders
-- (a win 1, a tie 0.5, a loss 0) and the interval counts pairs (`games`), never orders (`orders` beside).
-- requires: pairwise
CREATE OR REPLACE TABLE pairwise_board AS
WITH pairs AS (
    SELECT judge, source_a, source_b,
           list_filter([verdict_a_first, verdict_b_first], lambda v: v IS NOT NULL) AS verdicts
    FROM pairwise
), answered AS (
    SELECT judge, source_a, source_b, len(verdicts) AS orders,
           list_avg(list_transform(verdicts, lambda v: CASE v WHEN 'a' THEN 1.0 WHEN 'b' THEN 0.0 ELSE 0.5 END)) AS points
    FROM pairs
    WHERE len(verdicts) > 0
), sides AS (
    SELECT judge, source_a AS model, source_b AS opponent, orders, points FROM answered
    UNION ALL
    SELECT judge, source_b, source_a, orders, 1.0 - points FROM answered
), totals AS (
    SELECT judge, model, count(*) AS games, sum(orders) AS orders, sum(points) AS wins,
           list(DISTINCT opponent ORDER BY opponent) AS opponents
    FROM sides
    GROUP BY ALL
), rates AS (
    SELECT *, wins / games AS win_rate, 1.959964 AS z FROM totals
)
SELECT judge, model, games, orders, wins, win_rate,
       (win_rate + z * z / (2 * games) - z * sqrt(win_rate * (1 - win_rate) / games + z * z / (4 * games * games)))
           / (1 + z * z / games) AS ci_low,
       (win_rate + z * z / (2 * games) + z * sqrt(win_rate * (1 - win_rate) / games + z * z / (4 * games * games)))
           / (1 + z * z / games) AS ci_high,
       0.95 AS confidence, 'wilson over pairs' AS interval, opponents
FROM rates
ORDER BY judge, win_rate DESC, model;
