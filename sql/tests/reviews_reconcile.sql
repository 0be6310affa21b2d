-- Per venue, the reviews ingest handed to curation must equal the reviews curation kept plus
-- the ones it dropped (ingest's own rejects never reach reviews.parquet; ingest tests reconcile them).
-- requires: staging.ingested_reviews, reviews, rejects
WITH ingested AS (
    SELECT venue_id, count(DISTINCT review_id) AS n FROM staging.ingested_reviews GROUP BY ALL
), kept AS (
    SELECT venue_id, count(*) AS n FROM reviews GROUP BY ALL
), dropped AS (
    SELECT venue_id, count(*) AS n
    FROM rejects
    WHERE entity = 'review' AND stage = 'curate'
    GROUP BY ALL
)
SELECT ingested.venue_id, ingested.n AS ingested, coalesce(kept.n, 0) AS kept, coalesce(dropped.n, 0) AS rejected
FROM ingested
LEFT JOIN kept USING (venue_id)
LEFT JOIN dropped USING (venue_id)
WHERE ingested.n <> coalesce(kept.n, 0) + coalesce(dropped.n, 0);
