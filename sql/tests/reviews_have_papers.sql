-- A curated review whose paper is not among the curated papers.
-- requires: reviews, papers
SELECT r.review_id, r.paper_id FROM reviews AS r ANTI JOIN papers AS p USING (paper_id);
