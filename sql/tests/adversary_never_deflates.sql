-- The adversary keeps an edit only when it raises the metric, so its best text is never worse
-- than the original: a negative inflation means the search or its bookkeeping is wrong.
-- requires: staging.adversary
SELECT metric, candidate, original, best, inflation
FROM staging.adversary
WHERE inflation < 0;
