-- One row per (model, role, test): the exam's score against its pass line; `qualified`: the model
-- passed every test of its role (a failing model is dropped from its role or stops the run).
-- `score` is paper 001's P_c / P_p / P_s (P_s is 0 or 1); `raw_score` the statistic as measured
-- (for self-confidence the easy set's mean confidence minus the hard set's).
-- requires: staging.qualification
CREATE OR REPLACE TABLE qualification AS
SELECT model, role, test, n, score, raw_score, threshold, passed, confidence,
       bool_and(passed) OVER (PARTITION BY model, role) AS qualified
FROM staging.qualification
ORDER BY role, model, test;
