-- Human references that may be AI-written: each curated reference's Binoculars score (Beyond Rating,
-- paper 003: the observer LM's log-perplexity of the text over the observer-performer cross-entropy;
-- low means text an LM finds unsurprising) on the [score.reference_flags] pair, and flagged when it
-- is below the threshold of the Binoculars form in use; threshold_source says where that threshold comes
-- from (published for the two-model form, or calibrated by `grebench calibrate binoculars`). flagged is
-- null where the score is NaN or the form has no threshold (reason says why). The leaderboard's
-- mean_unflagged leaves the flagged references out.
-- requires: staging.reference_flags
CREATE OR REPLACE TABLE reference_flags AS
SELECT paper_id, review_id, binoculars, threshold, threshold_source, flagged, reason, observer, performer
FROM staging.reference_flags
ORDER BY paper_id, review_id;
