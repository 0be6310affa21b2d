-- Per candidate model, reviewed + excluded + rejected must equal the benchmark papers.
-- requires: candidate_coverage
SELECT model, benchmark_papers, reviewed, excluded, rejected
FROM candidate_coverage
WHERE reviewed + excluded + rejected <> benchmark_papers;
