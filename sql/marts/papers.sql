-- Curated papers: the ones that passed every curation rule, and whether the seeded benchmark
-- sample drew them (in_benchmark).
-- requires: staging.curated_papers
CREATE OR REPLACE TABLE papers AS
SELECT *
FROM staging.curated_papers
ORDER BY venue_id, paper_id;
