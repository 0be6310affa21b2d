-- The data behind the validation verdicts: the pipeline's curated reviews, a shipped sample of real
-- reviews or a user's review file; its source, license, which rows of the source, how many papers and
-- reviews it holds and how many papers validation drew. A NULL license or address: the note says why.
-- requires: staging.validation_data
CREATE OR REPLACE TABLE validation_data AS
SELECT data, label, source, source_url, license, release_rows, judgments_by, path, papers, reviews,
       papers_validated, candidates, levels, note
FROM staging.validation_data;
