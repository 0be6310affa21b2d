"""`grebench submit` without Prefect: every row of a submitted file lands in exactly one place (scored,
excluded by the declared cutoff, or rejected with its reason) in each format; the preprocessing goes
through the real Anthropic client to the local server; the database reconciles and the site lists
the rejects; names are guarded; `grebench export` writes what a submitter needs."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import duckdb
import polars as pl
import pytest
from typer.testing import CliRunner

from tasks.core.config import load_config
from tasks.core.submitted import submitted_candidates, submitted_exclusions
from tasks.stages.generate.submit import (
    SubmitError,
    build_submission,
    check_name,
    judge_submission,
    write_submission,
)
from tasks.stages.generate.submitted_file import SubmissionFileError, read_rows
from tasks.testing.anthropic_server import AnthropicServer
from tests.submit_data import good_review, write_config, write_curated

CUTOFF = date(2024, 3, 1)


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "fake-test-key-submit")
    path = write_config(tmp_path, ["bleu"], stages=("score", "validate", "materialize"))
    config = load_config(path).for_pipeline("t")
    write_curated(config)
    return config


@pytest.fixture
def anthropic(monkeypatch):
    with AnthropicServer() as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        yield server


def jsonl_with_bad_rows(path: Path) -> Path:
    """12 rows: 3 scored (P1, P2, P3), 1 excluded by the cutoff (P0), 8 rejected, one per reason."""
    lines = [
        json.dumps({"paper_id": "P1", "review": good_review(1)}),
        json.dumps({"paper_id": "P2", "review": good_review(2), "model": "agent v2 (retrieval, 3 reflections)"}),
        json.dumps({"paper_id": "P0", "review": good_review(0)}),
        json.dumps({"paper_id": "NOPE", "review": good_review(1)}),
        json.dumps({"paper_id": "P3", "review": "   "}),
        json.dumps({"paper_id": "P3", "review": "word " * 13000}),
        json.dumps({"paper_id": "P2", "review": good_review(2), "model": "agent v2 (retrieval, 3 reflections)"}),
        json.dumps({"paper_id": 7, "review": "A review of paper seven."}),
        "this line is not JSON",
        json.dumps({"paper_id": "P3", "review": good_review(3), "rating": 42}),
    ]
    raw = [line.encode() for line in lines]
    raw.append(b'{"paper_id": "P3", "review": "caf\xe9 latin-1 bytes in a review"}')
    raw.append(json.dumps({"paper_id": "P3", "review": good_review(3), "rating": 6, "confidence": 4}).encode())
    path.write_bytes(b"\n".join(raw) + b"\n")
    return path


def test_every_row_lands_once_with_its_reason(cfg, tmp_path):
    submission = build_submission(cfg, "t", jsonl_with_bad_rows(tmp_path / "reviews.jsonl"), "agent", CUTOFF)
    meta = submission.meta
    assert (meta["rows_in"], meta["accepted"], meta["excluded"], meta["rejected"], meta["missing"]) == (12, 3, 1, 8, 0)
    assert submission.candidates["paper_id"].to_list() == ["P1", "P2", "P3"]
    assert submission.exclusions.select("paper_id", "model", "reason").rows() == [
        ("P0", "agent", "public_on_or_before_cutoff")]
    rules = dict(zip(submission.rejects["entity_id"], submission.rejects["rule"], strict=True))
    assert rules == {"agent#4": "unknown_paper", "agent#5": "empty_review", "agent#6": "review_too_long",
                     "agent#7": "duplicate_row", "agent#8": "wrong_type", "agent#9": "bad_json",
                     "agent#10": "bad_rating", "agent#11": "bad_encoding"}
    assert set(submission.rejects["stage"]) == {"submit"}
    assert "42 is not on the common scale" in submission.rejects.filter(pl.col("rule") == "bad_rating")["detail"][0]
    p3 = submission.candidates.filter(pl.col("paper_id") == "P3").row(0, named=True)
    assert (p3["rating_answer"], p3["confidence_answer"], p3["backend"], p3["sections"]) == ("6", "4", "submitted", 4)
    assert submission.candidates.filter(pl.col("paper_id") == "P2")["model_id"][0].startswith("agent v2")


def test_csv_and_parquet_rows_are_typed_and_checked(cfg, tmp_path):
    csv = tmp_path / "reviews.csv"
    csv.write_bytes(b"paper_id,review,rating\n"
                    + f'P1,"{good_review(1)}",6\n'.encode()
                    + f'P1,"{good_review(1, 0)}",\n'.encode()                 # a second, different review of P1
                    + b'P2,"na\xefve bytes",5\n'                              # latin-1, not UTF-8
                    + f'P3,"{good_review(3)}",high\n'.encode()                # a rating that is no number
                    + b'P3,too,many,fields\n'
                    + f'P2,"{good_review(2)}",8\n'.encode())
    sub = build_submission(cfg, "t", csv, "csv-agent", CUTOFF)
    assert sub.candidates["paper_id"].to_list() == ["P2"] and sub.candidates["rating_answer"].to_list() == ["8"]
    assert sorted(zip(sub.rejects["entity_id"], sub.rejects["rule"], strict=True)) == [
        ("csv-agent#1", "duplicate_paper"), ("csv-agent#2", "duplicate_paper"), ("csv-agent#3", "bad_encoding"),
        ("csv-agent#4", "wrong_type"), ("csv-agent#5", "wrong_columns")]
    parquet = tmp_path / "reviews.parquet"
    pl.DataFrame({"paper_id": ["P1", "P2", "P3"], "review": [good_review(1), good_review(2), good_review(3)],
                  "rating": ["6", None, "8"]}).write_parquet(parquet)       # rating stored as text: wrong type
    sub = build_submission(cfg, "t", parquet, "pq-agent", CUTOFF)
    assert sub.candidates["paper_id"].to_list() == ["P2"]
    assert sub.rejects["rule"].to_list() == ["wrong_type", "wrong_type"]
    assert "rating must be a number" in sub.rejects["detail"][0]


@pytest.mark.parametrize(("name", "content", "message"), [
    ("reviews.txt", b"paper_id,review\n", "unknown format '.txt'"),
    ("reviews.csv", b"paper_id,text\nP1,x\n", "missing column(s) ['review']"),
    ("reviews.csv", b"paper_id,review,reveiw\nP1,x,y\n", "unknown column(s) ['reveiw']"),
    ("reviews.jsonl", b'{"paper_id": "P1", "review": "x", "score": 3}\n', "unknown key(s) ['score']"),
    ("reviews.parquet", b"PAR1 not really", "not a readable Parquet file"),
    ("reviews.csv", b"", "the file is empty"),
])
def test_a_file_that_cannot_be_read_is_one_error(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(SubmissionFileError, match=None) as error:
        read_rows(path)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_nothing_to_score_and_bad_names_are_refused(cfg, tmp_path):
    path = tmp_path / "only_bad.jsonl"
    path.write_text(json.dumps({"paper_id": "NOPE", "review": "x y z"}) + "\n"
                    + json.dumps({"paper_id": "P0", "review": good_review(0)}) + "\n")
    with pytest.raises(SubmitError, match=r"no review can be scored \(1 unknown_paper, 1 public on or before"):
        build_submission(cfg, "t", path, "agent", CUTOFF)
    for bad in ("human", "-dash", "a b"):
        with pytest.raises(SubmitError):
            check_name(cfg, "t", bad, replace=False)


def test_submission_is_judged_written_read_by_scoring_and_reconciles_in_the_database(cfg, tmp_path, anthropic):
    from tasks.metrics import get
    from tasks.report.site import build_site
    from tasks.stages.materialize.build import build_database
    from tasks.stages.score.inputs import load_inputs

    assert check_name(cfg, "t", "agent", replace=False) is False
    submission = build_submission(cfg, "t", jsonl_with_bad_rows(tmp_path / "reviews.jsonl"), "agent", CUTOFF)
    judged = judge_submission(submission, cfg)
    summary = write_submission(cfg, "t", submission, judged)
    assert summary.llm_calls == 3 and summary.rows_in == 12 and summary.rows_out == 3
    assert set(judged.judgments["review_id"]) == {"agent/P1", "agent/P2", "agent/P3"}
    with pytest.raises(SubmitError, match="pass --replace"):
        check_name(cfg, "t", "agent", replace=False)
    assert check_name(cfg, "t", "agent", replace=True) is True

    from tasks.metrics.quality import load_facts
    from tasks.metrics.review_quality.fields import parse_rating

    answers = load_facts(cfg, "t").answers()                 # rating_mae / accept_accuracy read these
    assert parse_rating(answers["agent/P3"], cfg.curate.common_scale) == (6.0, None)
    assert answers["agent/P1"] is None
    candidates = submitted_candidates(cfg, "t")
    assert candidates["candidate"].to_list() == ["agent/P1", "agent/P2", "agent/P3"]
    assert set(candidates["source"]) == {"agent"} and candidates["judgments"].null_count() == 0
    inputs = load_inputs(cfg, "t", get(["bleu"]))
    assert set(inputs.candidates.filter(pl.col("source") == "agent")["paper_id"]) == {"P1", "P2", "P3"}
    assert submitted_exclusions(cfg, "t")["paper_id"].to_list() == ["P0"]

    built = build_database(cfg, "t")
    assert built.tables["submissions"] == 1 and built.tables["candidates"] == 3
    with duckdb.connect(str(cfg.database), read_only=True) as con:
        assert con.execute("select rows_in, accepted, excluded, rejected from submissions").fetchone() == (12, 3, 1, 8)
        assert con.execute("select distinct origin from candidates").fetchall() == [("submitted",)]
        assert con.execute("select origin, model from exclusions").fetchall() == [("submitted", "agent")]
        rules = con.execute("select rule, count(*) from rejects where stage = 'submit' group by all").fetchall()
        assert dict(rules)["duplicate_row"] == 1 and sum(n for _, n in rules) == 8
        assert con.execute("select count(*) from candidate_coverage").fetchone() == (0,)   # generated only
    site = build_site(cfg.database, tmp_path / "site")
    page = (site.out_dir / "submissions.html").read_text()
    assert "agent" in page and "bad_encoding" in page and "review_too_long" in page and "unknown_paper" in page
    assert "submissions.html" in (site.out_dir / "index.html").read_text()


def test_a_broken_reconciliation_fails_the_data_test(cfg, tmp_path, anthropic):
    from tasks.core.layout import write_parquet
    from tasks.stages.materialize.build import DataTestError, build_database

    submission = build_submission(cfg, "t", jsonl_with_bad_rows(tmp_path / "reviews.jsonl"), "agent", CUTOFF)
    write_submission(cfg, "t", submission, judge_submission(submission, cfg))
    folder = cfg.data_dir / "t" / "submit" / "agent"
    rejects = pl.read_parquet(folder / "rejects.parquet")
    write_parquet(rejects.filter(pl.col("rule") != "bad_json"), folder / "rejects.parquet")   # a row lost
    with pytest.raises(DataTestError, match="submissions_reconcile"):
        build_database(cfg, "t")


def test_export_writes_papers_form_template_and_release(cfg, tmp_path):
    from flows.cli.main import app
    from tasks.core.layout import stage_dir
    from tests.submit_data import VENUE

    pl.DataFrame({"paper_id": ["P2"], "text": ["1 Introduction\nGraph pooling, in full."]}).write_parquet(
        stage_dir(cfg, "t", "ingest", VENUE) / "pdf_texts.parquet")
    out = tmp_path / "export"
    result = CliRunner().invoke(app, ["export", "--out", str(out), "-c", str(cfg.root / "pipelines.toml")])
    assert result.exit_code == 0, result.output
    assert "4 papers (1 with their PDF text), release" in result.output
    papers = [json.loads(line) for line in (out / "papers.jsonl").read_text().splitlines()]
    assert [p["paper_id"] for p in papers] == ["P0", "P1", "P2", "P3"]
    assert papers[1]["title"] == "On graph pooling" and papers[1]["pdf_url"] == "/pdf?id=P1"
    assert papers[1]["text"] is None and papers[1]["text_source"] == "none"
    assert papers[2]["text"].startswith("1 Introduction") and papers[2]["text_source"] == "pdf_text"
    template = (out / "submission_template.csv").read_text().splitlines()
    assert template[0] == "paper_id,review,rating,confidence,model" and len(template) == 5
    release = json.loads((out / "release.json").read_text())
    form = (out / "review_form.md").read_text()
    assert release["release_id"] in form and "1, 3, 5, 6, 8, 10" in form and "--cutoff" in form
    assert "R00" not in (out / "papers.jsonl").read_text()              # human reviews are never exported
    missing = CliRunner().invoke(app, ["export", "--out", str(out), "--pipeline", "nope",
                                       "-c", str(cfg.root / "pipelines.toml")])
    assert missing.exit_code == 2 and "unknown pipeline 'nope'" in missing.output


def test_submit_cli_errors_are_one_line(cfg, tmp_path):
    from flows.cli.main import app

    config = str(cfg.root / "pipelines.toml")
    path = jsonl_with_bad_rows(tmp_path / "reviews.jsonl")
    for args, message in ((["--cutoff", "last year"], "--cutoff 'last year'"),
                          (["--cutoff", "2024-03-01", "--name", "human"], "reserved"),
                          (["--cutoff", "2024-03-01", "--reviews", str(tmp_path / "none.csv")], "no such file")):
        argv = ["submit", "--reviews", str(path), "--name", "agent", *args, "-c", config]
        result = CliRunner().invoke(app, argv)
        assert result.exit_code == 2 and message in result.output and result.output.count("\n") == 1, result.output
