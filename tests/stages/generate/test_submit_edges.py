"""`grebench submit` at its edges: two submits of one name at once, a swap a kill cannot lose,
names too long, rows no parser should choke on, a full disk or read-only cache, and the server guard
of every command that starts flows."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from tasks.core.submitted import submission_folders
from tasks.stages.generate import submit as submit_module
from tasks.stages.generate.submit import build_submission, submission_lock
from tasks.stages.generate.submitted_file import read_rows
from tasks.testing.anthropic_server import AnthropicServer, heuristic_responder
from tests.submit_data import good_review, scoring_config

ROOT = Path(__file__).resolve().parents[3]
CUTOFF = date(2024, 3, 1)


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "fake-test-key-submit")
    return scoring_config(tmp_path)


def slow_responder(params: dict) -> str:
    time.sleep(1.0)            # long enough that two submits started together overlap
    return heuristic_responder(params)


def reviews_file(path: Path, papers: tuple[str, ...] = ("P1", "P2", "P3")) -> Path:
    path.write_text("".join(json.dumps({"paper_id": p, "review": good_review(int(p[1]))}) + "\n" for p in papers))
    return path


def cli(args: list[str], **env: str) -> subprocess.Popen[str]:
    """`grebench <args>` in a child process (its own interpreter, as a user would run it)."""
    return subprocess.Popen([sys.executable, "-c", "from flows.cli.main import main; main()", *args], cwd=ROOT,
                            env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_two_submits_of_one_new_name_at_once_one_wins_the_other_says_so(cfg, tmp_path):
    config = str(cfg.root / "pipelines.toml")
    with AnthropicServer(slow_responder) as server:
        args = ["submit", "--name", "agent", "--cutoff", "2024-03-01", "--no-score", "-c", config]
        children = [cli([*args, "--reviews", str(reviews_file(tmp_path / f"r{i}.jsonl", papers))],
                        ANTHROPIC_BASE_URL=server.url)
                    for i, papers in enumerate([("P1", "P2", "P3"), ("P1", "P2")])]
        results = [(child.wait(timeout=300), *child.communicate()) for child in children]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], results
    loser = next(err for code, _, err in results if code == 2)
    assert loser.count("\n") == 1 and loser.startswith("error: ") and "Traceback" not in loser, loser
    assert "under way" in loser or "pass --replace" in loser
    winner = next(out for code, out, _ in results if code == 0)
    folders = submission_folders(cfg, "t")
    assert [f.name for f in folders] == ["agent"]
    kept = pl.read_parquet(folders[0] / "submitted_candidates.parquet")["paper_id"].to_list()
    assert f"{len(kept)} accepted" in winner            # what the winner said is what is on disk


def test_a_submit_of_a_name_another_holds_stops_at_once_in_one_line(cfg, tmp_path):
    from flows.cli.main import app

    path = reviews_file(tmp_path / "r.jsonl")
    with submission_lock(cfg, "t", "agent"):
        result = CliRunner().invoke(app, ["submit", "--reviews", str(path), "--name", "agent", "--cutoff", "2024-03-01",
                                          "--no-score", "-c", str(cfg.root / "pipelines.toml")])
    assert result.exit_code == 2 and "under way" in result.output and result.output.count("\n") == 1, result.output


def make_version(base: Path, name: str, marker: str) -> Path:
    version = base / f".{name}.{marker * 32}.v"
    version.mkdir(parents=True)
    (version / "submission.parquet").write_bytes(b"x")
    return version


def test_a_swap_killed_at_any_point_leaves_the_old_or_the_new_submission(cfg, monkeypatch):
    base = cfg.data_dir / "t" / "submit"
    legacy = base / "agent"                               # a folder of the layout before links
    legacy.mkdir(parents=True)
    (legacy / "submission.parquet").write_bytes(b"old")
    new = make_version(base, "agent", "a")

    def killed(target: Path, version: Path) -> None:      # the process dies just before the link is made
        raise SystemExit(137)

    monkeypatch.setattr(submit_module, "point", killed)
    with pytest.raises(SystemExit):
        submit_module.swap_in(legacy, new)
    monkeypatch.undo()
    assert not legacy.exists()                            # the old folder is aside...
    with submission_lock(cfg, "t", "agent"):              # ...and the next submit's lock puts it back
        pass
    assert (legacy / "submission.parquet").read_bytes() == b"old"
    assert not new.exists()                               # the unfinished version is cleared away
    newer = make_version(base, "agent", "b")
    submit_module.swap_in(legacy, newer)
    assert legacy.is_symlink() and (legacy / "submission.parquet").read_bytes() == b"x"
    assert sorted(p.name for p in base.iterdir() if p.name.startswith(".agent.")) == [newer.name]


def test_a_name_too_long_is_one_line_before_anything_is_written(cfg, tmp_path):
    from flows.cli.main import app

    result = CliRunner().invoke(app, ["submit", "--reviews", str(reviews_file(tmp_path / "r.jsonl")), "--name",
                                      "a" * 300, "--cutoff", "2024-03-01", "-c", str(cfg.root / "pipelines.toml")])
    assert result.exit_code == 2 and "300 characters; at most 100" in result.output, result.output
    assert result.output.count("\n") == 1 and not (cfg.data_dir / "t" / "submit").exists()


def test_rows_no_parser_should_choke_on_are_rejects_of_their_own(cfg, tmp_path):
    path = tmp_path / "odd.jsonl"
    path.write_text("\n".join([json.dumps({"paper_id": "P1", "review": good_review(1)}),
                               "[" * 100_000,
                               '{"paper_id": "P2", "review": "x", "rating": ' + "9" * 5001 + "}",
                               json.dumps({"paper_id": "P3", "review": good_review(3), "rating": float("nan")})]) + "\n")
    submission = build_submission(cfg, "t", path, "agent", CUTOFF)
    rules = dict(zip(submission.rejects["entity_id"], submission.rejects["rule"], strict=True))
    assert rules == {"agent#2": "bad_json", "agent#3": "bad_json", "agent#4": "bad_rating"}
    details = submission.rejects["detail"].to_list()
    assert "nested too deeply" in details[0] and "digits" in details[1] and "NaN" in details[2]
    assert submission.candidates["paper_id"].to_list() == ["P1"]


def test_a_10_mb_review_in_a_csv_rejects_only_its_row(cfg, tmp_path):
    path = tmp_path / "big.csv"
    path.write_text("paper_id,review,rating\n"
                    f"P1,\"{good_review(1)}\",6\n"
                    f"P2,\"{'word ' * 2_000_000}\",6\n"
                    "P3,text,NaN\n")
    read = read_rows(path)
    assert [r["row"] for r in read.rows] == [1, 2] and [(r["row"], r["rule"]) for r in read.rejects] == [
        (3, "bad_rating")]
    submission = build_submission(cfg, "t", path, "agent", CUTOFF)
    assert dict(zip(submission.rejects["entity_id"], submission.rejects["rule"], strict=True)) == {
        "agent#2": "review_too_long", "agent#3": "bad_rating"}


@pytest.mark.parametrize(("message", "said"), [("database or disk is full", "the disk is full"),
                                               ("attempt to write a readonly database", "read-only")])
def test_a_full_disk_or_read_only_llm_cache_is_one_line(cfg, tmp_path, monkeypatch, message, said):
    from flows.cli.main import app
    from tasks.lm.cache import LLMCache

    def refuse(self, items):
        raise sqlite3.OperationalError(message)

    monkeypatch.setattr(LLMCache, "put_many", refuse)
    with AnthropicServer() as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        result = CliRunner().invoke(app, ["submit", "--reviews", str(reviews_file(tmp_path / "r.jsonl")), "--name",
                                          "agent", "--cutoff", "2024-03-01", "-c", str(cfg.root / "pipelines.toml")])
    assert result.exit_code == 2 and said in result.output and result.output.count("\n") == 1, result.output
    assert submission_folders(cfg, "t") == []


def test_submit_starts_its_flows_with_the_server_guard_as_run_does(cfg, tmp_path, monkeypatch):
    import flows.cli.server
    import flows.pipeline
    from flows.cli.main import app

    calls: list[str] = []
    monkeypatch.setattr(flows.cli.server, "prepare_flows", lambda: calls.append("guard"))
    monkeypatch.setattr(flows.pipeline, "pipeline_flow", lambda **kwargs: calls.append("flow"))
    with AnthropicServer() as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        result = CliRunner().invoke(app, ["submit", "--reviews", str(reviews_file(tmp_path / "r.jsonl")), "--name",
                                          "agent", "--cutoff", "2024-03-01", "-c", str(cfg.root / "pipelines.toml")])
    assert result.exit_code == 0, result.output
    assert calls == ["guard", "flow"]
