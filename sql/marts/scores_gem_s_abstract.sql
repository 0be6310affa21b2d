-- The gem_s_abstract metric only, one row per (paper, candidate, reference).
-- requires: scores
CREATE OR REPLACE VIEW scores_gem_s_abstract AS
SELECT * EXCLUDE (metric) FROM scores WHERE metric = 'gem_s_abstract';
