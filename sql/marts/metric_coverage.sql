-- Every metric of the registry (tasks/metrics), one row each: whether this pipeline has a number for
-- it, and where it has none, why in one line. "human only": the human reviews have numbers and no model does.
-- Per metric, evaluation LM and model: `metric_model_coverage`. A metric has a number when at least one of its score
-- rows is finite. Its absence is explained by what the pipeline asked for ([score] metrics and
-- baselines, [validate] metrics) and, where it was asked for, by the reasons its score rows carry.
-- The registry and the pipeline's request come in as parameters (tasks/stages/materialize/build.py).
-- requires: staging.scores
CREATE OR REPLACE TABLE metric_coverage AS
WITH registry AS (
    SELECT unnest($registry_metrics) AS metric, unnest($registry_families) AS needs,
           unnest($registry_descriptions) AS description
), asked AS (
    SELECT unnest($asked_metrics) AS metric, unnest($asked_as) AS asked_as
), rows AS (
    SELECT metric, count(*) AS score_rows,
           count(*) FILTER (score IS NOT NULL AND isfinite(score)) AS numbers,
           count(*) FILTER (score IS NOT NULL AND isfinite(score) AND source <> 'human') AS model_numbers,
           list(DISTINCT eval_lm ORDER BY eval_lm) FILTER (eval_lm IS NOT NULL) AS eval_lms
    FROM staging.scores
    GROUP BY metric
), reasons AS (
    SELECT metric, reason, count(*) AS n,
           row_number() OVER (PARTITION BY metric ORDER BY count(*) DESC, reason) AS place
    FROM staging.scores
    WHERE NOT (score IS NOT NULL AND isfinite(score))
    GROUP BY metric, reason
), absent AS (
    SELECT metric,
           string_agg(coalesce(reason, 'no reason recorded') || ' (' || n || ' rows)', '; ' ORDER BY place)
               FILTER (place <= 3) AS reasons
    FROM reasons
    GROUP BY metric
)
SELECT registry.metric, registry.needs, asked.asked_as,
       coalesce(rows.score_rows, 0) AS score_rows, coalesce(rows.numbers, 0) AS numbers,
       coalesce(rows.eval_lms, []) AS eval_lms,
       CASE WHEN coalesce(rows.model_numbers, 0) > 0 THEN 'number'
            WHEN coalesce(rows.numbers, 0) > 0 THEN 'human only' ELSE 'absent' END AS status,
       CASE
           WHEN coalesce(rows.numbers, 0) > 0 AND rows.model_numbers = 0
               THEN 'only the human reviews have a number; no model does (metric_model_coverage says why per model)'
           WHEN coalesce(rows.numbers, 0) > 0 AND absent.reasons IS NOT NULL
               THEN 'some rows without a number: ' || absent.reasons
           WHEN coalesce(rows.numbers, 0) > 0 THEN NULL
           WHEN asked.metric IS NULL
               THEN 'not asked for: the pipeline names it in neither [score] metrics, baselines nor [validate] metrics'
           WHEN rows.metric IS NULL
               THEN 'asked for, but no score row yet: the score stage has not run since it was asked for'
           ELSE 'every score row lacks a number: ' || absent.reasons
       END AS why,
       registry.description
FROM registry
LEFT JOIN asked USING (metric)
LEFT JOIN rows USING (metric)
LEFT JOIN absent USING (metric)
ORDER BY status DESC, registry.metric;
