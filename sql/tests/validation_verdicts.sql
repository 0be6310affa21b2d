-- Verdicts follow the rules: strategies are a degradation or a manipulation, a verdict needs at
-- least two pairs, an untested row says why, and `verdict` agrees with `passed`.
-- requires: validation
SELECT metric, strategy, kind, n, passed, verdict, reason
FROM validation
WHERE kind NOT IN ('degradation', 'manipulation')
   OR (passed IS NOT NULL AND n < 2)
   OR (passed IS NULL AND reason IS NULL)
   OR verdict NOT IN ('pass', 'fail', 'inconclusive')
   OR (verdict = 'pass') IS DISTINCT FROM coalesce(passed, false)
   OR (verdict = 'inconclusive') IS DISTINCT FROM (passed IS NULL);
