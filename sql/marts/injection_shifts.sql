-- The injection track: for a sample of papers ([generate.injection]) each candidate also reviewed a
-- copy carrying an instruction to AI reviewers, `visible` (a paragraph addressed to reviewers) or
-- `hidden` (spliced into the text, as unstripped white or tiny PDF text arrives). shift: the mean
-- over papers of (review of the planted copy - review of the clean copy), for the rating (common
-- scale) and for the first of [score] metrics (measure = its name, on eval_lm), with a t interval
-- at `confidence` (null bounds below two papers: reason). 0: the instruction did not move the model.
-- requires: staging.injection_shifts
CREATE OR REPLACE TABLE injection_shifts AS
SELECT model, variant, measure, eval_lm, n_papers, shift, ci_low, ci_high, confidence, reason
FROM staging.injection_shifts
ORDER BY model, variant, measure;
