-- The headline metrics ([score] headline, passed as $headline_metrics) in their order: the columns of the
-- overview (sql/marts/overview.sql), which cannot take the list itself (a PIVOT over values read from the data
-- expands into several statements, and those take no bound parameters). Its `board_level`: the level whose
-- validation tests vouch for a board, the first the pipeline validates at ([validate] level). Built with the
-- leaderboard (its staging table), whose columns it names.
-- requires: staging.leaderboard
CREATE OR REPLACE TABLE headline AS
SELECT unnest($headline_metrics::VARCHAR[]) AS metric,
       generate_subscripts($headline_metrics::VARCHAR[], 1) AS position,
       $board_level AS board_level;
