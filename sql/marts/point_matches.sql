-- M(a, h) of each candidate point against each human point of the same field of the paper's other
-- reviews: asked = among the match_top_k most similar by embedding (then judged by the LLM),
-- otherwise 0 without a call; match null with reason match_unanswered when the judge gave no Yes / No.
-- requires: staging.point_matches
CREATE OR REPLACE TABLE point_matches AS
SELECT paper_id, candidate, field, a_position, reference, h_position, similarity, asked, match, reason, model,
       prompt_version
FROM staging.point_matches
ORDER BY candidate, field, a_position, reference, h_position;
