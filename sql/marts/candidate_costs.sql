-- What each candidate model's reviews cost, beside the leaderboard's quality: reviews, tokens and
-- US dollars per review at the configured prices. An unknown is NULL, never 0: a submitted system
-- reports no tokens or cost, and a model with any review of unknown cost has no per-review figure
-- (cost_unknown counts those reviews). A local model's API cost is 0: it runs on this machine.
-- requires: staging.candidates
CREATE OR REPLACE TABLE candidate_costs AS
SELECT model,
       any_value(origin) AS origin,
       count(*) AS reviews,
       CASE WHEN count(tokens) = count(*) THEN avg(tokens) END AS tokens_per_review,
       CASE WHEN count(cost) = count(*) THEN avg(cost) END AS usd_per_review,
       CASE WHEN count(cost) = count(*) THEN sum(cost) END AS usd_total,
       count(*) - count(cost) AS cost_unknown
FROM staging.candidates
GROUP BY model
ORDER BY model;
