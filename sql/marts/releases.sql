-- Releases: an id hashed from the benchmark papers, the references' judgments, the prompts, the
-- evaluation LMs and the metric settings (each part's hash alongside); results with one release
-- id are comparable. A row is written once, when the release is first built (created_at); the models
-- on a release are in `release_models`.
-- requires: staging.releases
CREATE OR REPLACE TABLE releases AS
SELECT release_id, pipeline, created_at, n_papers, n_references, venues, papers, metrics,
       eval_lms, prompts, papers_hash, references_hash, prompts_hash, eval_lms_hash, metrics_hash
FROM staging.releases
ORDER BY created_at, release_id;
