-- One row per (model, role, test), known roles and tests, and no pass without a score.
-- requires: qualification
SELECT model, role, test, count(*) AS rows, bool_or(passed AND score IS NULL OR isnan(score) AND passed) AS pass_without_score
FROM qualification
GROUP BY ALL
HAVING rows > 1 OR pass_without_score
    OR role NOT IN ('judge', 'oracle', 'matcher')
    OR test NOT IN ('consistency', 'pertinence', 'self_confidence');
