-- The pairwise board, beside the pointwise leaderboard: per judge and model, the verdicts it took part
-- in (each order of each pair one game; a tie half a win), its win rate and a 95% Wilson interval on it.
-- The two orders of a pair are not independent games, so the interval is on the narrow side.
-- requires: pairwise
CREATE OR REPLACE TABLE pairwise_board AS
WITH verdicts AS (
    SELECT judge, source_a, source_b, verdict_a_first AS verdict FROM pairwise WHERE verdict_a_first IS NOT NULL
    UNION ALL
    SELECT judge, source_a, source_b, verdict_b_first FROM pairwise WHERE verdict_b_first IS NOT NULL
), games AS (
    SELECT judge, source_a AS model, source_b AS opponent,
           CASE verdict WHEN 'a' THEN 1.0 WHEN 'b' THEN 0.0 ELSE 0.5 END AS points
    FROM verdicts
    UNION ALL
    SELECT judge, source_b, source_a, CASE verdict WHEN 'b' THEN 1.0 WHEN 'a' THEN 0.0 ELSE 0.5 END
    FROM verdicts
), totals AS (
    SELECT judge, model, count(*) AS games, sum(points) AS wins,
           list(DISTINCT opponent ORDER BY opponent) AS opponents
    FROM games
    GROUP BY ALL
), rates AS (
    SELECT *, wins / games AS win_rate, 1.959964 AS z FROM totals
)
SELECT judge, model, games, wins, win_rate,
       (win_rate + z * z / (2 * games) - z * sqrt(win_rate * (1 - win_rate) / games + z * z / (4 * games * games)))
           / (1 + z * z / games) AS ci_low,
       (win_rate + z * z / (2 * games) + z * sqrt(win_rate * (1 - win_rate) / games + z * z / (4 * games * games)))
           / (1 + z * z / games) AS ci_high,
       0.95 AS confidence, 'wilson' AS interval, opponents
FROM rates
ORDER BY judge, win_rate DESC, model;
