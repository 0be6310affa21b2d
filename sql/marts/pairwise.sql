-- One row per pair of generated candidates of a paper: the verdict ("a", "b", "tie" for a panel split
-- evenly, null when unanswered) with candidate_a shown first and with candidate_b shown first, whether
-- it flipped with the order, the review the reviser rewrote for the pair (revised_candidate) and the judge.
-- requires: staging.pairwise
CREATE OR REPLACE TABLE pairwise AS
SELECT paper_id, candidate_a, candidate_b, source_a, source_b, revised_candidate, verdict_a_first, verdict_b_first,
       flipped, judge, prompt_version
FROM staging.pairwise
ORDER BY judge, paper_id, candidate_a, candidate_b;
