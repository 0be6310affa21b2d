-- The overview has one row per model, and a row for every model of a headline metric's board.
-- requires: overview, headline, leaderboard
SELECT model, count(*) AS rows_in_overview
FROM overview
GROUP BY model
HAVING count(*) <> 1
UNION ALL
SELECT DISTINCT l.model, 0 AS rows_in_overview
FROM leaderboard AS l
JOIN headline AS h USING (metric)
WHERE l.model NOT IN (SELECT model FROM overview);
