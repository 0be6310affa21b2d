-- A curated review whose edited_after_rebuttal flag disagrees with its first and final versions
-- (checked where the main columns hold the first version; null flag: no history was read).
-- requires: reviews
SELECT review_id, edited_after_rebuttal
FROM reviews
WHERE review_version = 'first' AND edited_after_rebuttal IS NOT NULL
  AND edited_after_rebuttal <> (rating_venue IS DISTINCT FROM rating_final
                                OR confidence IS DISTINCT FROM confidence_final
                                OR review_text IS DISTINCT FROM review_text_final);
