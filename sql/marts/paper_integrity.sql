-- Text in a paper's PDF that a reader of the page cannot see (white or tiny text, invisible render
-- mode, text off the page): where instructions to AI reviewers hide. One row per hidden span of a
-- curated paper; `stripped` says whether it was left out of the text candidates and judges read
-- ([ingest] strip_hidden_text). Papers without hidden text have no row.
-- requires: staging.paper_integrity, staging.curated_papers
CREATE OR REPLACE TABLE paper_integrity AS
SELECT paper_id, page, reason, text, length(text) AS n_chars, stripped
FROM staging.paper_integrity
SEMI JOIN staging.curated_papers USING (paper_id)
ORDER BY paper_id, page, reason, text;
