-- Candidate reviews: one review per benchmark paper and candidate model, with whether the paper
-- was cut to fit the model's context, the tokens used and what it cost. origin: generated (the
-- generate stage) or submitted (`grebench submit`: backend "submitted", model_id the system's own
-- description, rating_answer / confidence_answer the submitted rating and confidence). rating: the
-- candidate's rating on the common scale; rating_method how: stated (the review states it), else read
-- at its answer's rating position (readout:<backend>/<model>, toplogprobs:<backend>/<model>,
-- asked:<backend>/<model>, answer), or submitted; null rating: none given.
-- requires: staging.candidates
CREATE OR REPLACE TABLE candidates AS
SELECT
    candidate_id,
    paper_id,
    venue_id,
    model,
    origin,
    model_id,
    prompt_version,
    review,
    sections,
    text_source,
    truncated,
    cut,
    kept_chars,
    paper_chars,
    answer_truncated,
    input_tokens,
    output_tokens,
    tokens,
    cost,
    rating_answer,
    confidence_answer,
    rating,
    rating_method
FROM staging.candidates
ORDER BY model, venue_id, paper_id;
