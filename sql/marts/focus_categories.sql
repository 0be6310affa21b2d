-- The eight-category focus of each field (Beyond Rating's figure 4): the share of points in each
-- category, humans (every human review) and each candidate model.
-- requires: staging.points
CREATE OR REPLACE TABLE focus_categories AS
WITH counts AS (
    SELECT field, source AS model, category, count(*) AS n_points
    FROM staging.points
    GROUP BY ALL
)
SELECT field, model, category, n_points, n_points / sum(n_points) OVER (PARTITION BY field, model) AS share
FROM counts
ORDER BY field, model, category;
