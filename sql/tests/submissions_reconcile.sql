-- A submission's rows must reconcile: rows in = accepted + excluded + rejected, and each count must
-- match the rows of `candidates`, `exclusions` and `rejects` it left there.
-- requires: submissions, candidates, exclusions, rejects
WITH accepted AS (
    SELECT model AS name, count(*) AS n FROM candidates WHERE origin = 'submitted' GROUP BY ALL
), excluded AS (
    SELECT model AS name, count(*) AS n FROM exclusions WHERE origin = 'submitted' GROUP BY ALL
), rejected AS (
    SELECT split_part(entity_id, '#', 1) AS name, count(*) AS n FROM rejects WHERE stage = 'submit' GROUP BY ALL
)
SELECT s.name, s.rows_in, s.accepted, s.excluded, s.rejected,
       coalesce(a.n, 0) AS candidate_rows, coalesce(e.n, 0) AS exclusion_rows, coalesce(r.n, 0) AS reject_rows
FROM submissions AS s
LEFT JOIN accepted AS a USING (name)
LEFT JOIN excluded AS e USING (name)
LEFT JOIN rejected AS r USING (name)
WHERE s.rows_in <> s.accepted + s.excluded + s.rejected
   OR s.accepted <> coalesce(a.n, 0)
   OR s.excluded <> coalesce(e.n, 0)
   OR s.rejected <> coalesce(r.n, 0);
