-- A review-quality value outside its range: shares (precision, recall, F1, question score, accept
-- accuracy) in [0, 1], focus KL and rating MAE non-negative; a NaN value must carry its reason.
-- requires: review_quality
SELECT candidate, metric, value, reason
FROM review_quality
WHERE (isnan(value) AND reason IS NULL)
   OR (NOT isnan(value) AND (
        ((metric LIKE 'points_%' OR metric IN ('question_score', 'accept_accuracy', 'accept_accuracy_readout')) AND (value < 0 OR value > 1))
        OR ((metric LIKE 'focus_kl_%' OR metric LIKE 'rating_mae%') AND value < 0)));
