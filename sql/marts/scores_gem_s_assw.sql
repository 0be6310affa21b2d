-- The gem_s_assw metric only, one row per (paper, candidate, reference).
-- requires: scores
CREATE OR REPLACE VIEW scores_gem_s_assw AS
SELECT * EXCLUDE (metric) FROM scores WHERE metric = 'gem_s_assw';
