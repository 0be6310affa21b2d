-- One row per member of the judging panel ([score] judges, else [score.oracle]): its Auto-PRE fusion
-- weight, where the weight comes from (exam: the mean of its exam scores, consistency, pertinence and
-- self-confidence; config: [score] judge_weights; none: it weighs 1), and whether the panel's scores
-- use it (applied false: [qualify] on_fail = "report" leaves the panel as configured; "weigh" keeps a failed
-- member and weighs it by its exam).
-- requires: staging.panel_weights
CREATE OR REPLACE TABLE panel_weights AS
SELECT model, weight, source, applied
FROM staging.panel_weights
ORDER BY model;
