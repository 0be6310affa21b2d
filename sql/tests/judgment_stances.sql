-- A judgment with a stance outside the four, or whose text does not start with its stance.
-- requires: judgments
SELECT review_id, position, stance, text
FROM judgments
WHERE stance NOT IN ('appreciates', 'criticizes', 'questions', 'suggests')
   OR NOT starts_with(text, 'The reviewer ' || stance);
