"""sql/marts/overview.sql on in-memory DuckDB: a model per row, a headline metric per column, each metric's
validation status counted at the level its board reads."""

from __future__ import annotations

import duckdb
import pytest

from tests.site_data import run_marts

BOARD = """
CREATE TABLE leaderboard AS SELECT * FROM (VALUES
    ('gem', 'lm-a', 1, 1, 2, 'm1', 'generated', false, 0.5::DOUBLE, 0.4::DOUBLE, 0.6::DOUBLE, 0.9::DOUBLE, 9,
     CAST(NULL AS VARCHAR)),
    ('gem', 'lm-a', 2, 1, 2, 'm2', 'generated', false, 0.4, 0.3, 0.5, 0.9, 8, NULL),
    ('gem', 'lm-a', 3, 3, 3, 'human', 'human', true, 0.1, 0.0, 0.2, 0.9, 9, NULL),
    ('gem', 'lm-b', 1, 1, 1, 'm1', 'generated', false, 0.7, 0.6, 0.8, 0.9, 9, NULL),
    ('bleu', 'sacrebleu', 1, 1, 1, 'm1', 'generated', false, 0.2, 0.1, 0.3, 0.9, 9, NULL),
    ('rouge_l', 'rouge', 1, 1, 1, 'm3', 'generated', false, 0.3, 0.2, 0.4, 0.9, 4, NULL)
) AS t(metric, eval_lm, rank, rank_low, rank_high, model, kind, is_human, mean, ci_low, ci_high, confidence,
       n_papers, reason)
"""
# gem: deletion at both levels (the raw row counts), a rephraser only on the judgment lines (counted), an
# inconclusive raw test; bleu: failed at raw, passed on the lines (the raw row counts)
VALIDATION = """
CREATE TABLE staging.validation AS SELECT * FROM (VALUES
    ('gem', 'sentence_deletion', 'raw', true), ('gem', 'sentence_deletion', 'judgments', false),
    ('gem', 'rephrase', 'judgments', true), ('gem', 'random_replacement', 'raw', CAST(NULL AS BOOLEAN)),
    ('bleu', 'sentence_deletion', 'raw', false), ('bleu', 'sentence_deletion', 'judgments', true)
) AS t(metric, strategy, level, passed)
"""


@pytest.fixture
def con():
    with duckdb.connect() as con:
        con.execute("CREATE SCHEMA staging")
        con.execute(BOARD)
        con.execute(VALIDATION)
        con.execute("CREATE TABLE staging.candidates AS SELECT * FROM (VALUES ('m1', 'generated', 100, 0.01), "
                    "('m2', 'generated', 50, NULL)) AS t(model, origin, tokens, cost)")
        yield con


def build(con, headline: list[str], board_level: str = "raw") -> None:
    run_marts(con, ("candidate_costs", "headline", "overview"),
              {"headline_metrics": headline, "board_level": board_level})


def test_one_row_per_model_and_a_column_per_scored_headline_metric_and_evaluation_lm(con):
    build(con, ["gem", "llm_judge", "bleu"])
    columns = [r[0] for r in con.execute("DESCRIBE overview").fetchall()]
    assert columns == ["model", "is_human", "kind", "bleu", "gem @ lm-a", "gem @ lm-b", "papers_scored",
                       "usd_per_review", "tokens_per_review"]     # llm_judge not scored, rouge_l not headline
    rows = con.execute('SELECT model, is_human, "gem @ lm-a".mean, "gem @ lm-a".rank, "gem @ lm-b".position, '
                       "bleu.position, papers_scored, usd_per_review FROM overview").fetchall()
    assert rows == [("human", True, 0.1, 3, None, None, 9, None),    # the human baseline first
                    ("m1", False, 0.5, 1, 1, 3, 9, 0.01),            # a cell's place in [score] headline
                    ("m2", False, 0.4, 2, None, None, 8, None)]      # m2's cost unknown: NULL, never 0


def test_the_status_counts_each_strategy_once_at_the_boards_level(con):
    build(con, ["gem", "bleu"])
    gem = con.execute('SELECT "gem @ lm-a" FROM overview WHERE model = \'m1\'').fetchone()[0]
    assert (gem["tests_run"], gem["tests_passed"], gem["tests_failed"], gem["tests_inconclusive"]) == (3, 2, 0, 1)
    assert gem["levels"] == "judgments, raw" and gem["board_level"] == "raw"
    bleu = con.execute("SELECT bleu FROM overview WHERE model = 'm1'").fetchone()[0]
    assert (bleu["tests_run"], bleu["tests_passed"], bleu["tests_failed"], bleu["levels"]) == (1, 0, 1, "raw")
    build(con, ["bleu"], board_level="judgments")                   # a pipeline that validates on the lines first
    bleu = con.execute("SELECT bleu FROM overview WHERE model = 'm1'").fetchone()[0]
    assert (bleu["tests_run"], bleu["tests_passed"], bleu["levels"]) == (1, 1, "judgments")
    assert con.execute("SELECT count(*) FROM overview").fetchone()[0] == 1     # only m1 has a bleu board


def test_no_headline_metric_scored_leaves_an_overview_without_rows(con):
    build(con, [])
    assert con.execute("SELECT count(*) FROM overview").fetchone()[0] == 0
