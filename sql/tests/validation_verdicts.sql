-- Verdicts follow the rules: strategies are a degradation or a manipulation, a verdict needs at
-- least two pairs, and an untested row says why.
-- requires: validation
SELECT metric, strategy, kind, n, passed, reason
FROM validation
WHERE kind NOT IN ('degradation', 'manipulation')
   OR (passed IS NOT NULL AND n < 2)
   OR (passed IS NULL AND reason IS NULL);
