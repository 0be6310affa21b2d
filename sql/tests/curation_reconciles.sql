-- Per venue, the papers and reviews ingest handed to curation must equal the ones curation kept
-- plus the ones it dropped (ingest's own rejects never reach the Parquet; ingest tests reconcile them).
-- requires: staging.ingested_papers, staging.ingested_reviews, papers, reviews, rejects
WITH ingested AS (
    SELECT 'paper' AS entity, venue_id, count(DISTINCT paper_id) AS n FROM staging.ingested_papers GROUP BY ALL
    UNION ALL
    SELECT 'review' AS entity, venue_id, count(DISTINCT review_id) AS n FROM staging.ingested_reviews GROUP BY ALL
), kept AS (
    SELECT 'paper' AS entity, venue_id, count(*) AS n FROM papers GROUP BY ALL
    UNION ALL
    SELECT 'review' AS entity, venue_id, count(*) AS n FROM reviews GROUP BY ALL
), dropped AS (
    SELECT entity, venue_id, count(*) AS n
    FROM rejects
    WHERE entity IN ('paper', 'review') AND stage = 'curate'
    GROUP BY ALL
)
SELECT entity, ingested.venue_id, ingested.n AS ingested, coalesce(kept.n, 0) AS kept,
       coalesce(dropped.n, 0) AS rejected
FROM ingested
LEFT JOIN kept USING (entity, venue_id)
LEFT JOIN dropped USING (entity, venue_id)
WHERE ingested.n <> coalesce(kept.n, 0) + coalesce(dropped.n, 0);
