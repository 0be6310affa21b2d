-- Each review-quality metric per model (humans: is_human): the mean over papers with a value.
-- requires: staging.review_quality
CREATE OR REPLACE TABLE review_quality_models AS
SELECT metric, source AS model, source = 'human' AS is_human,
       avg(value) FILTER (WHERE NOT isnan(value)) AS mean,
       count(*) FILTER (WHERE NOT isnan(value)) AS n_papers,
       count(*) FILTER (WHERE isnan(value)) AS n_missing
FROM staging.review_quality
GROUP BY ALL
ORDER BY metric, model;
