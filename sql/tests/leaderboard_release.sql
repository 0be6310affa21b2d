-- Every leaderboard row names the release it was computed on, that release is recorded, one build
-- has one release, a rank interval is ordered, and kind is one of human / generated / submitted.
-- requires: leaderboard, releases
SELECT metric, model, release_id, 'no recorded release' AS problem
FROM leaderboard
WHERE release_id IS NULL OR release_id NOT IN (SELECT release_id FROM releases)
UNION ALL
SELECT 'all', 'all', string_agg(DISTINCT release_id, ','), 'several releases in one leaderboard'
FROM leaderboard
HAVING count(DISTINCT release_id) > 1
UNION ALL
SELECT metric, model, release_id, 'rank interval out of order'
FROM leaderboard
WHERE rank_low > rank_high
UNION ALL
SELECT metric, model, release_id, 'unknown kind ' || coalesce(kind, 'null')
FROM leaderboard
WHERE kind IS NULL OR kind NOT IN ('human', 'generated', 'submitted');
