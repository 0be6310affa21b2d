-- Per candidate model: benchmark papers, how many it reviewed, how many the contamination guard
-- excluded and how many were rejected (no usable answer), with its tokens and cost. Generated
-- candidates only: a submission's rows reconcile in `submissions`.
-- (Reads staging tables: marts build in file-name order.)
-- requires: staging.candidates, staging.exclusions, staging.curated_papers, staging.rejects
CREATE OR REPLACE TABLE candidate_coverage AS
WITH benchmark AS (
    SELECT count(*) AS papers FROM staging.curated_papers WHERE in_benchmark
), reviewed AS (
    SELECT model, count(*) AS reviewed, sum(truncated::INTEGER) AS truncated, sum(tokens) AS tokens,
           sum(cost) AS cost_usd
    FROM staging.candidates
    WHERE origin = 'generated'
    GROUP BY ALL
), excluded AS (
    SELECT model, count(*) AS excluded FROM staging.exclusions WHERE origin = 'generated' GROUP BY ALL
), rejected AS (
    SELECT split_part(entity_id, '/', 1) AS model, count(*) AS rejected
    FROM staging.rejects
    WHERE stage = 'generate' AND entity = 'candidate_review'
    GROUP BY ALL
), models AS (
    SELECT model FROM reviewed UNION SELECT model FROM excluded UNION SELECT model FROM rejected
)
SELECT
    models.model,
    benchmark.papers AS benchmark_papers,
    coalesce(reviewed.reviewed, 0) AS reviewed,
    coalesce(excluded.excluded, 0) AS excluded,
    coalesce(rejected.rejected, 0) AS rejected,
    coalesce(reviewed.truncated, 0) AS truncated,
    coalesce(reviewed.tokens, 0) AS tokens,
    coalesce(reviewed.cost_usd, 0) AS cost_usd
FROM models
CROSS JOIN benchmark
LEFT JOIN reviewed USING (model)
LEFT JOIN excluded USING (model)
LEFT JOIN rejected USING (model)
ORDER BY models.model;
