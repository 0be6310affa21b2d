-- One row per (model, role, test): the exam's score against its pass line; `qualified`: the model
-- passed every test of its role (a failing model is dropped from its role or stops the run).
-- requires: staging.qualification
CREATE OR REPLACE TABLE qualification AS
SELECT model, role, test, n, score, threshold, passed, confidence,
       bool_and(passed) OVER (PARTITION BY model, role) AS qualified
FROM staging.qualification
ORDER BY role, model, test;
