-- Length confound: per metric, Spearman of the candidate score with the candidate's length in words.
-- source: validate/length_confound.parquet
CREATE OR REPLACE TABLE staging.length_confound AS
SELECT * FROM read_parquet($files, union_by_name = true);
