-- How each review-quality metric relates to rating error across candidate models (Beyond Rating's
-- figure 3: weakness recall vs rating MAE): Pearson r over the models' means (humans left out);
-- null below three models with both values.
-- requires: staging.review_quality
CREATE OR REPLACE TABLE rating_relation AS
WITH per_model AS (
    SELECT source AS model, metric, avg(value) FILTER (WHERE NOT isnan(value)) AS mean
    FROM staging.review_quality
    WHERE source <> 'human'
    GROUP BY ALL
),
mae AS (
    SELECT model, mean AS rating_mae FROM per_model WHERE metric = 'rating_mae'
)
SELECT p.metric,
       count(*) AS n_models,
       CASE WHEN count(*) >= 3 THEN corr(p.mean, m.rating_mae) END AS pearson_r
FROM per_model AS p
JOIN mae AS m USING (model)
WHERE p.metric <> 'rating_mae' AND p.mean IS NOT NULL AND m.rating_mae IS NOT NULL
GROUP BY ALL
ORDER BY p.metric;
