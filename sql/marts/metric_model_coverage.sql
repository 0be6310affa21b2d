-- Per metric, evaluation LM and model (the human reviews as the model "human"): how many candidates have a
-- number and, where some lack one, the commonest reasons. A metric can have numbers for the humans and none for
-- a model (a judge that never answers on a model's reviews, a rating the model never states): `metric_coverage`
-- alone would say "number".
-- requires: staging.scores
CREATE OR REPLACE TABLE metric_model_coverage AS
WITH per_candidate AS (
    SELECT metric, eval_lm, source AS model, candidate,
           bool_or(score IS NOT NULL AND isfinite(score)) AS has_number,
           min(reason) FILTER (NOT (score IS NOT NULL AND isfinite(score))) AS reason
    FROM staging.scores
    GROUP BY metric, eval_lm, source, candidate
), reasons AS (
    SELECT metric, eval_lm, model, reason, count(*) AS n,
           row_number() OVER (PARTITION BY metric, eval_lm, model ORDER BY count(*) DESC, reason) AS place
    FROM per_candidate
    WHERE NOT has_number
    GROUP BY metric, eval_lm, model, reason
), whys AS (
    SELECT metric, eval_lm, model,
           string_agg(coalesce(reason, 'no reason recorded') || ' (' || n || ')', '; ' ORDER BY place) AS why
    FROM reasons WHERE place <= 3
    GROUP BY metric, eval_lm, model
), counts AS (
    SELECT metric, eval_lm, model, count(*) AS candidates, count(*) FILTER (has_number) AS with_number
    FROM per_candidate
    GROUP BY metric, eval_lm, model
)
SELECT c.metric, c.eval_lm, c.model, c.candidates, c.with_number,
       CASE WHEN c.with_number = c.candidates THEN 'number'
            WHEN c.with_number > 0 THEN 'partial' ELSE 'absent' END AS status,
       w.why
FROM counts AS c
LEFT JOIN whys AS w ON w.metric = c.metric AND w.eval_lm IS NOT DISTINCT FROM c.eval_lm AND w.model = c.model
ORDER BY c.metric, c.eval_lm, c.model;
