-- The gem_raw metric only, one row per (paper, candidate, reference).
-- requires: scores
CREATE OR REPLACE VIEW scores_gem_raw AS
SELECT * EXCLUDE (metric) FROM scores WHERE metric = 'gem_raw';
