-- Metrics that fail any validation test, with the strategies they fail and the SMD of each.
-- (Reads staging.validation: marts run in file-name order, so this one runs before `validation`.)
-- requires: staging.validation
CREATE OR REPLACE VIEW failing_metrics AS
SELECT metric,
       count(*) FILTER (NOT passed) AS failed_tests,
       count(*) FILTER (passed IS NOT NULL) AS tests,
       list(strategy || coalesce(' (' || level || ')', '') ORDER BY strategy) FILTER (NOT passed)
           AS failed_strategies,
       list(round(smd, 3) ORDER BY strategy) FILTER (NOT passed) AS failed_smd
FROM staging.validation
GROUP BY ALL
HAVING count(*) FILTER (NOT passed) > 0
ORDER BY failed_tests DESC, metric;
