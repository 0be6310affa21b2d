-- The data behind the verdicts is named once, with counts that hold together: one row, papers drawn no
-- more than the data holds, and a NULL license or address explained by its note.
-- requires: validation_data
SELECT data, papers, reviews, papers_validated, license, note
FROM validation_data
WHERE (SELECT count(*) FROM validation_data) <> 1
   OR papers_validated > papers OR papers > reviews OR papers_validated < 1
   OR ((license IS NULL OR source_url IS NULL) AND note IS NULL);
