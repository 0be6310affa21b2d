-- Atomic points of every review's strengths, weaknesses and questions (human and candidate), each
-- with one of eight categories; question points also a kind (Explain / Supplement / Other);
-- split_from names the merged field an LLM split (strengths_and_weaknesses).
-- requires: staging.points
CREATE OR REPLACE TABLE points AS
SELECT review_id, paper_id, source, field, position, category, kind, text, split_from, model, prompt_version
FROM staging.points
ORDER BY paper_id, review_id, field, position;
