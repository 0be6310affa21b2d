"""The shipped demo end to end, as a newcomer runs it: `grebench run demo` on the project's own
pipelines.toml (its data in a temporary folder, its LM the embedded SmolLM2), then what the docs and
the issues promise of its database: every SQL example in README.md and docs/ runs against it, every
generated candidate has a rating error and an accept/reject agreement, the panel weights and the
hidden-text findings are tables."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
QUERY = re.compile(r'grebench query "([^"]+)"')
SQL_BLOCK = re.compile(r"```sql\n(.*?)```", re.S)


def doc_queries() -> list[tuple[str, str]]:
    """(where, sql) of every query the docs give: `grebench query "..."` and the ```sql blocks."""
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in QUERY.finditer(text):
            line = text[: match.start()].count("\n") + 1
            found.append((f"{path.relative_to(ROOT)}:{line}", match.group(1)))
        for block in SQL_BLOCK.finditer(text):
            line = text[: block.start()].count("\n") + 2
            for k, statement in enumerate(s for s in block.group(1).split(";") if s.strip()):
                found.append((f"{path.relative_to(ROOT)}:{line}#{k + 1}", statement.strip()))
    return found


def test_the_docs_give_queries_to_check() -> None:
    where = {w.split(":")[0] for w, _ in doc_queries()}
    assert "README.md" in where and len(doc_queries()) >= 15


@pytest.fixture(scope="module")
def demo_database(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("demo")
    (folder / "pipelines.toml").write_text((ROOT / "pipelines.toml").read_text(encoding="utf-8"), encoding="utf-8")
    run = subprocess.run([sys.executable, "-c", "from flows.cli.main import main; main()", "run", "demo",
                          "--config", str(folder / "pipelines.toml")],
                         cwd=folder, capture_output=True, text=True, timeout=3000)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return folder / "data" / "demo" / "grebench.duckdb"


def query(database: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(database), read_only=True) as con:
        return con.execute(sql).fetchall()


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_every_query_in_the_docs_runs_on_the_demo_database(demo_database) -> None:
    failures = []
    for where, sql in doc_queries():
        try:
            query(demo_database, sql)
        except duckdb.Error as error:
            failures.append(f"{where}: {str(error).splitlines()[0]}")
    assert not failures, "\n".join(failures)


@pytest.mark.slow
def test_every_generated_candidate_is_rated(demo_database) -> None:
    rows = query(demo_database, "select model, rating, rating_method from candidates where origin = 'generated'")
    assert rows and all(method is not None for _, _, method in rows)
    assert {m.split(":")[0] for _, _, m in rows} >= {"readout", "toplogprobs"}   # local; the chat API candidate
    # every generated model has a rating error: a number, or the reason its review gave none
    errors = query(demo_database, """
        select c.model, count(*) filter (where not isnan(s.score)) as numbers, count(*) as rows
        from scores s join candidates c on c.candidate_id = s.candidate
        where s.metric = 'rating_mae' and c.origin = 'generated' group by all""")
    assert {model for model, _, _ in errors} == {model for model, _, _ in rows}
    readout_models = {model for model, _, method in rows if method.startswith("readout")}
    assert all(numbers == n for model, numbers, n in errors if model in readout_models)


@pytest.mark.slow
def test_the_demo_records_hidden_text_panel_weights_and_the_ai_rate(demo_database) -> None:
    assert query(demo_database, "select count(*) from paper_integrity")[0][0] > 0
    assert query(demo_database, "select model, source, applied from panel_weights") == [("local/smollm2", "exam", False)]
    rates = query(demo_database, "select value, reason from review_quality where metric = 'ai_rate'")
    assert rates and all(value in (0.0, 1.0) and reason is None for value, reason in rates)
    assert query(demo_database, "select count(*) from reference_flags where flagged")[0][0] >= 1
    assert query(demo_database, "select count(*) from injection_shifts")[0][0] > 0


# The metrics `full` leaves out, each with the reason a user reads in docs/running.md.
NOT_IN_FULL = {name: "a seq2seq model, and none ships (bartscore_* is GEM's BARTScore on the evaluation LM)"
               for name in ("bartscore_seq2seq_precision", "bartscore_seq2seq_recall", "bartscore_seq2seq_f1")}


def test_the_full_pipeline_names_every_registered_metric_or_says_why_not() -> None:
    from tasks.core.config import load_config
    from tasks.metrics import REGISTRY

    full = load_config(ROOT / "pipelines.toml").for_pipeline("full")
    named = set(full.score.all_metrics)
    assert named.isdisjoint(NOT_IN_FULL)
    assert set(REGISTRY) == named | set(NOT_IN_FULL), sorted(set(REGISTRY) - named - set(NOT_IN_FULL))
    assert len(full.score.eval_lms) == 2 and full.validate.metrics == ("gem",)   # the boards, one cheap check


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_validate_demo_reaches_a_verdict_for_gem(tmp_path) -> None:
    # the demo validates 2 papers, fewer pairs than min_pairs; validate-demo has enough for verdicts
    (tmp_path / "pipelines.toml").write_text((ROOT / "pipelines.toml").read_text(encoding="utf-8"), encoding="utf-8")
    run = subprocess.run([sys.executable, "-c", "from flows.cli.main import main; main()", "run", "validate-demo",
                          "--config", str(tmp_path / "pipelines.toml")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=3000)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = query(tmp_path / "data" / "validate-demo" / "grebench.duckdb", "select metric, n, verdict from validation")
    assert rows and {m for m, _, _ in rows} == {"gem"}
    assert all(n >= 10 and verdict in ("pass", "fail") for _, n, verdict in rows)
