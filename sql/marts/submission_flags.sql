-- Submitted reviews carrying text aimed at the LLM evaluators rather than the authors: invisible
-- characters, hidden markup, instructions to a judge, bare "master key" answers. The reviews are
-- kept and scored; this table says which, so their judge and oracle scores can be read with care.
-- requires: staging.submission_flags
CREATE OR REPLACE TABLE submission_flags AS
SELECT name, "row", paper_id, candidate_id, kind, detail
FROM staging.submission_flags
ORDER BY name, "row", kind, detail;
