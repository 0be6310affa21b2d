-- requires: staging.synopses
CREATE OR REPLACE TABLE synopses AS
SELECT * FROM staging.synopses ORDER BY paper_id, kind;
