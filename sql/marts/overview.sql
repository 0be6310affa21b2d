-- The overview a reader sees first (the site's index, `grebench report`'s markdown): one row per model of the
-- leaderboard, the human baseline marked (is_human), and one column per headline metric (the `headline` table:
-- [score] headline; a metric the run did not score has no column; a metric with boards on several
-- evaluation LMs has one column per LM, "<metric> @ <eval_lm>"). Each cell is a struct: the model's mean on
-- that board with its interval (ci_low, ci_high at `confidence`) and rank (rank_low..rank_high: its bootstrap
-- rank interval), and the metric's validation status at the level the board reads (`headline`.board_level:
-- the first level the pipeline validates at): per strategy the tests at that level, else, for a strategy
-- tested only at another (a raw run's rephrasers rewrite the judgment lines), those; tests_passed of
-- tests_run, with tests_failed and tests_inconclusive (fewer pairs than [validate] min_pairs) among them, and
-- the levels counted (`board_level`: the one the board reads). The columns come in name order; `position` is
-- the column's place in [score] headline (the site's order). Beside the cells: what a review cost
-- (`candidate_costs`: unknown is NULL, never 0) and the papers scored (the most any headline board of the
-- model rests on).
-- requires: headline, leaderboard, staging.validation, candidate_costs
CREATE OR REPLACE TABLE overview AS
WITH models AS (
    SELECT l.model, bool_or(l.is_human) AS is_human, any_value(l.kind) AS kind, max(l.n_papers) AS papers_scored
    FROM leaderboard AS l
    JOIN headline AS h USING (metric)
    GROUP BY l.model
)
SELECT m.model, m.is_human, m.kind, w.* EXCLUDE (model), m.papers_scored, c.usd_per_review, c.tokens_per_review
FROM models AS m
JOIN (  -- the PIVOT's source holds its own CTEs: DuckDB reads the column names from it in a statement of their own
    PIVOT (
        WITH lms AS (
            SELECT metric, count(DISTINCT coalesce(eval_lm, '')) AS n_lms FROM leaderboard GROUP BY metric
        ), tested AS (   -- per metric and strategy: the tests at the board's level, else those at the levels it has
            SELECT v.metric, v.strategy, v.level, v.passed
            FROM staging.validation AS v
            CROSS JOIN (SELECT any_value(board_level) AS board_level FROM headline) AS b
            QUALIFY v.level IS NOT DISTINCT FROM b.board_level
                 OR count(*) FILTER (v.level IS NOT DISTINCT FROM b.board_level)
                        OVER (PARTITION BY v.metric, v.strategy) = 0
        ), status AS (
            SELECT metric,
                   count(*) AS tests_run,
                   count(*) FILTER (passed) AS tests_passed,
                   count(*) FILTER (NOT passed) AS tests_failed,
                   count(*) FILTER (passed IS NULL) AS tests_inconclusive,
                   string_agg(DISTINCT level, ', ' ORDER BY level) AS levels
            FROM tested
            GROUP BY metric
        )
        SELECT l.model,
               CASE WHEN m.n_lms > 1 THEN l.metric || ' @ ' || coalesce(l.eval_lm, 'none') ELSE l.metric END AS heading,
               {'metric': l.metric, 'eval_lm': l.eval_lm, 'position': h.position, 'mean': l.mean,
                'ci_low': l.ci_low, 'ci_high': l.ci_high, 'confidence': l.confidence, 'rank': l.rank,
                'rank_low': l.rank_low, 'rank_high': l.rank_high, 'n_papers': l.n_papers, 'reason': l.reason,
                'tests_run': coalesce(s.tests_run, 0), 'tests_passed': coalesce(s.tests_passed, 0),
                'tests_failed': coalesce(s.tests_failed, 0), 'tests_inconclusive': coalesce(s.tests_inconclusive, 0),
                'levels': s.levels, 'board_level': h.board_level} AS cell
        FROM leaderboard AS l
        JOIN headline AS h USING (metric)
        JOIN lms AS m USING (metric)
        LEFT JOIN status AS s USING (metric)
    ) ON heading USING any_value(cell) GROUP BY model
) AS w USING (model)
LEFT JOIN candidate_costs AS c USING (model)
ORDER BY m.is_human DESC, m.model;
