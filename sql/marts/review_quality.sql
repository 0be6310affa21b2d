-- Beyond Rating's review-quality metrics and the rating outcomes per candidate review and paper
-- (the values behind the registry's points_*, focus_kl_*, question_score, summary_coverage,
-- binoculars, rating_mae, accept_accuracy scores).
-- requires: staging.review_quality
CREATE OR REPLACE TABLE review_quality AS
SELECT paper_id, candidate, source AS model, metric, value, reason
FROM staging.review_quality
ORDER BY metric, model, paper_id, candidate;
