-- The gem metric only, one row per (paper, candidate, reference).
-- requires: scores
CREATE OR REPLACE VIEW scores_gem AS
SELECT * EXCLUDE (metric) FROM scores WHERE metric = 'gem';
