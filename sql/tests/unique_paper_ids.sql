-- A curated paper id appears more than once.
-- requires: papers
SELECT paper_id, count(*) AS n FROM papers GROUP BY ALL HAVING n > 1;
