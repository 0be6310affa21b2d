-- Every leaderboard interval brackets its mean, and rows with a mean count at least one paper.
-- requires: leaderboard
SELECT metric, eval_lm, model, mean, ci_low, ci_high, n_papers
FROM leaderboard
WHERE (NOT isnan(mean) AND n_papers < 1)
   OR (NOT isnan(ci_low) AND NOT (ci_low <= mean AND mean <= ci_high));
