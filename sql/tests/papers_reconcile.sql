-- Per venue, ingested papers must equal kept papers plus papers curation dropped.
-- requires: staging.ingested_papers, papers, rejects
WITH ingested AS (
    SELECT venue_id, count(DISTINCT paper_id) AS n FROM staging.ingested_papers GROUP BY ALL
), kept AS (
    SELECT venue_id, count(*) AS n FROM papers GROUP BY ALL
), dropped AS (
    SELECT venue_id, count(*) AS n
    FROM rejects
    WHERE entity = 'paper' AND stage = 'curate'
    GROUP BY ALL
)
SELECT ingested.venue_id, ingested.n AS ingested, coalesce(kept.n, 0) AS kept, coalesce(dropped.n, 0) AS rejected
FROM ingested
LEFT JOIN kept USING (venue_id)
LEFT JOIN dropped USING (venue_id)
WHERE ingested.n <> coalesce(kept.n, 0) + coalesce(dropped.n, 0);
