"""The issue's "done when", end to end through the CLI and Prefect: a submitted file with bad rows mixed
in becomes a "submitted" row on the leaderboard and the site, with its rejects listed by reason; a
second submission of the same name replaces the first only with --replace; rescoring with an added
metric (`grebench run t --stages score,validate,materialize`) makes no generation call (counted at the
candidate's server) and gives every candidate, generated and submitted, the new metric's scores."""

from __future__ import annotations

import duckdb
import pytest
from typer.testing import CliRunner

from flows.cli.main import app
from flows.pipeline import pipeline_flow
from tasks.core.config import load_config
from tasks.testing.anthropic_server import AnthropicServer
from tasks.testing.openai_server import OpenAIServer
from tests.stages.generate.test_generate import openai_tagged_review
from tests.stages.generate.test_submit import jsonl_with_bad_rows
from tests.submit_data import OPENAI_CANDIDATE, good_review, write_config, write_curated

# BLEU and ROUGE-L need no evaluation LM; the reference flags' Binoculars would load one for nothing
# this test reads (they have their own tests: tests/stages/score/test_reference_flags.py)
NO_FLAGS = "\n[score.reference_flags]\nenabled = false\n"


def query(cfg, sql: str) -> list[tuple]:
    with duckdb.connect(str(cfg.database), read_only=True) as con:
        return con.execute(sql).fetchall()


@pytest.mark.slow
def test_submit_scores_replaces_only_when_asked_and_rescoring_never_generates(prefect_harness, tmp_path,
                                                                                 monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "fake-test-key-submit-flow")
    monkeypatch.setenv("GREBENCH_TEST_OPENAI_KEY", "sk-test-submit-flow")
    runner = CliRunner()
    with OpenAIServer(openai_tagged_review) as candidate_server, AnthropicServer() as preprocess_server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", preprocess_server.url)
        candidate = OPENAI_CANDIDATE.format(base_url=candidate_server.base_url) + NO_FLAGS
        config = write_config(tmp_path, ["bleu"], candidate,
                              stages=("preprocess", "generate", "score", "validate", "materialize"))
        cfg = load_config(config).for_pipeline("t")
        write_curated(cfg)
        # the first run outside CliRunner: Prefect's console log handler keeps the stream it first
        # writes to, and each CliRunner.invoke closes its own when it returns
        pipeline_flow(pipeline="t", config_path=str(config))
        generation_calls = sum(candidate_server.counts.values())
        assert generation_calls > 0

        reviews = jsonl_with_bad_rows(tmp_path / "reviews.jsonl")
        submitted = runner.invoke(app, ["submit", "--reviews", str(reviews), "--name", "agent", "--cutoff",
                                        "2024-03-01", "-c", str(config)])
        assert submitted.exit_code == 0, submitted.output
        assert "12 rows: 3 accepted, 1 excluded by the cutoff 2024-03-01, 8 rejected" in submitted.output
        assert "unknown_paper" in submitted.output and "bad_encoding" in submitted.output
        board = dict(query(cfg, "select model, kind from leaderboard where metric = 'bleu'"))
        assert board == {"agent": "submitted", "gen-model": "generated", "human": "human"}
        assert query(cfg, "select n_papers, n_excluded from leaderboard where model = 'agent'") == [(3, 1)]
        assert query(cfg, "select count(*) from comparisons where 'agent' in (model_a, model_b)") == [(2,)]
        # three shared papers: the exact sign-flip test cannot go below 2/8, so every neighbour is tied
        assert query(cfg, "select bool_and(not significant) from comparisons") == [(True,)]
        assert query(cfg, "select len(tied_with) > 0 from leaderboard where model = 'agent'") == [(True,)]
        release = query(cfg, "select distinct release_id from leaderboard")
        assert len(release) == 1 and query(cfg, "select release_id from releases") == release
        assert query(cfg, "select release_id, list(model order by model) from release_models group by all") == [
            (release[0][0], ["agent", "gen-model", "human"])]

        site = runner.invoke(app, ["site", "-c", str(config)])
        assert site.exit_code == 0, site.output
        page = (cfg.data_dir / "site" / "leaderboard.html").read_text()
        assert 'class="model submitted"' in page and '<span class="badge">submitted</span>' in page
        assert "<th>rank interval</th>" in page and "<th>tied with</th>" in page
        submissions = (cfg.data_dir / "site" / "submissions.html").read_text()
        assert "duplicate_row" in submissions and "review_too_long" in submissions
        assert release[0][0] in (cfg.data_dir / "site" / "releases.html").read_text()

        again = tmp_path / "again.jsonl"
        again.write_text("".join(f'{{"paper_id": "P{k}", "review": {good_review(k, 0)!r}}}\n'.replace("'", '"')
                                 for k in (1, 2, 3)))
        refused = runner.invoke(app, ["submit", "--reviews", str(again), "--name", "agent", "--cutoff", "2024-03-01",
                                      "--no-score", "-c", str(config)])
        assert refused.exit_code == 2 and "pass --replace" in refused.output and refused.output.count("\n") == 1
        assert query(cfg, "select rows_in, replaced from submissions") == [(12, False)]
        replaced = runner.invoke(app, ["submit", "--reviews", str(again), "--name", "agent", "--cutoff", "2024-03-01",
                                       "--replace", "--no-score", "-c", str(config)])
        assert replaced.exit_code == 0 and "replaced the earlier submission" in replaced.output, replaced.output
        assert "grebench run t --stages score,validate,materialize" in replaced.output
        preprocess_calls = sum(preprocess_server.counts.values())

        # a new metric: one command rescores every candidate, and no candidate is asked to write again
        write_config(tmp_path, ["bleu", "rouge_l"], candidate,
                     stages=("preprocess", "generate", "score", "validate", "materialize"))
        rescored = runner.invoke(app, ["run", "t", "--stages", "score,validate,materialize", "-c", str(config)])
        assert rescored.exit_code == 0, rescored.output
        assert sum(candidate_server.counts.values()) == generation_calls      # no generation call
        assert sum(preprocess_server.counts.values()) == preprocess_calls     # no preprocessing either
    rows = query(cfg, "select metric, model, kind, n_papers from leaderboard where model <> 'human' order by all")
    assert rows == [("bleu", "agent", "submitted", 3), ("bleu", "gen-model", "generated", 3),
                    ("rouge_l", "agent", "submitted", 3), ("rouge_l", "gen-model", "generated", 3)]
    assert query(cfg, "select rows_in, replaced from submissions") == [(3, True)]
    releases = query(cfg, "select release_id from releases order by created_at")
    assert len(releases) == 2                                            # the metric settings changed
    changes = query(cfg, "select what, added from release_changes where previous_id is not null")
    assert ("metrics", ["rouge_l"]) in changes
