-- A release id is recorded once.
-- requires: releases
SELECT release_id, count(*) AS n
FROM releases
GROUP BY ALL
HAVING n > 1;
