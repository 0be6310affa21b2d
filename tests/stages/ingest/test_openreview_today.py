"""Ingest against the local server answering as OpenReview does today (Policy.today), through the
real openreview-py clients: guests refused, token and password login, a token expiring mid-run,
hidden v2 edit histories, a v1 venue's original PDFs, rate limits with reset times and the
firewall's HTML 429, an accepted-only venue; and `grebench venues` on the group tree."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import polars as pl
import pytest
import requests
from typer.testing import CliRunner

import flows.pipeline
from flows.cli.main import app
from tasks.core.config import Config, IngestConfig, VenueConfig
from tasks.core.errors import AuthenticationError
from tasks.core.layout import stage_dir
from tasks.core.retry import is_retryable
from tasks.core.schema import HIDDEN_PDF, REVIEW_HIDDEN, REVIEW_ONE
from tasks.core.summary import StageSummary
from tasks.stages.curate.rules import curate_venue
from tasks.stages.ingest.auth import _minted
from tasks.stages.ingest.fetch import ingest_venue
from tasks.stages.ingest.openreview_client import RateLimited
from tasks.testing.openreview_server import Fault, Policy, serve_venues
from tasks.testing.pipelines import ingest_pipeline
from tasks.testing.synthetic import make_venue

V2, V1, NIPS = "ICLR.cc/2025/Conference", "ICLR.cc/2023/Conference", "NeurIPS.cc/2025/Conference"
OTHER = "GREBench.cc/2025/Today"      # a v2 venue the facts do not cover: its histories are asked for
USER, PASSWORD = "reviewer@example.org", "pw-Secret-4711"
ENV = ("OPENREVIEW_TOKEN", "OPENREVIEW_USERNAME", "OPENREVIEW_PASSWORD")
ONE_TO_TEN = {str(k): v for k, v in zip(range(1, 11), (1, 1, 3, 5, 5, 6, 8, 8, 10, 10), strict=True)}
runner = CliRunner()


def config(root: Path, **ingest) -> Config:
    settings = dict(page_size=5, backoff_seconds=0.01, max_backoff_seconds=0.05, timeout_seconds=5,
                    max_retries=3, pdf_max_bytes=2_000_000, pdf_workers=2, pdf=False)
    venues = {v: VenueConfig(rating_map=ONE_TO_TEN) for v in (V2, V1, OTHER)}
    # NeurIPS 2025's table is checked against its shipped form labels (1-6) whatever the server serves
    venues[NIPS] = VenueConfig(rating_map={"1": 1, "2": 3, "3": 5, "4": 6, "5": 8, "6": 10})
    return Config(root=root, ingest=IngestConfig(**{**settings, **ingest}), venues=venues)


pytestmark = pytest.mark.usefixtures("no_openreview_login")   # each test starts logged out (tests/conftest.py)


@pytest.fixture(scope="module")
def venues():
    return {V2: make_venue(V2, seed=1, bad_cases=False), V1: make_venue(V1, seed=2, bad_cases=False),
            NIPS: make_venue(NIPS, seed=3, bad_cases=False), OTHER: make_venue(OTHER, seed=4, bad_cases=False)}


def today(**changes) -> Policy:
    """The real service's answers; rate limits only where a test asks for them."""
    return Policy.today(**{"accounts": {USER: PASSWORD}, "accepted_only": frozenset({NIPS}),
                           "integer_scores": frozenset({V2}), "limits": {}, **changes})


@pytest.fixture
def server(venues):
    with serve_venues(venues.values(), page_limit=5, policy=today()) as srv:
        yield srv


# ---- `grebench run` against the "real" API (the local server as [ingest] api_*_url) ---------------------
@pytest.fixture
def cli_run(server, project_config, monkeypatch):
    """`grebench run today`: the CLI and the pipeline's body with the real ingest code (no Prefect server)."""
    def stage_flow(stage):
        def run(cfg, pipeline):
            total = StageSummary(0, 0)
            for venue in cfg.pipelines[pipeline].venues:
                total = total + ingest_venue(venue, cfg, stage_dir(cfg, pipeline, "ingest", venue)).summary()
            return total
        return run

    monkeypatch.setattr(flows.pipeline, "stage_flow", stage_flow)
    monkeypatch.setattr(flows.pipeline, "pipeline_flow", flows.pipeline.pipeline_flow.fn)
    path = project_config(ingest_pipeline("today", V2, server.v1_url, server.v2_url, page_size=5, pdf=True,
                                          pdf_workers=2, backoff_seconds=0.01, max_backoff_seconds=0.05,
                                          requests_per_minute=0, pdfs_per_hour=0, logged_in_requests_per_minute=0,
                                          logged_in_pdfs_per_hour=0, edits_per_minute=0))
    return lambda: runner.invoke(app, ["run", "today", "-c", str(path)])


def error_lines(output: str) -> list[str]:
    assert "Traceback" not in output
    return [line for line in output.splitlines() if line.startswith("error:")]


@pytest.mark.slow
def test_a_guest_is_refused_with_one_line_and_a_nonzero_exit(cli_run, server):
    result = cli_run()
    assert result.exit_code == 2, result.output
    assert error_lines(result.output) == ["error: OpenReview refuses guests (403 ChallengeRequiredError): "
                                          "set OPENREVIEW_TOKEN, or OPENREVIEW_USERNAME and OPENREVIEW_PASSWORD"]
    assert server.count(2, "groups") >= 1 and server.count(2, "notes") == 1   # /groups still answers guests


@pytest.mark.slow   # waits out a timeout or a retry back-off: seconds of sleeping
def test_a_token_expiring_mid_run_stops_in_one_line_and_a_new_token_resumes_fetching_nothing_twice(
        cli_run, server, monkeypatch):
    token = server.issue_token()
    server.expire_token(token, after=12)          # past the pages, among the histories
    monkeypatch.setenv("OPENREVIEW_TOKEN", token)
    first = cli_run()
    assert first.exit_code == 2, first.output
    [line] = error_lines(first.output)
    assert line.startswith("error: OpenReview refused OPENREVIEW_TOKEN (TokenExpiredError: Token has expired.")
    assert "set a fresh OPENREVIEW_TOKEN" in line and token not in first.output
    answered = len([r for r in server.log if r.status == 200])
    assert 10 <= answered <= 12

    monkeypatch.setenv("OPENREVIEW_TOKEN", server.issue_token())
    second = cli_run()
    assert second.exit_code == 0, second.output
    assert len([r for r in server.log if r.status == 200]) > answered and server.fetched_twice() == []


# ---- login ------------------------------------------------------------------------------------------------
def test_password_login_mints_one_token_for_the_run_and_no_credential_is_written_anywhere(
        server, venues, tmp_path, monkeypatch, caplog, capsys):
    monkeypatch.setenv("OPENREVIEW_USERNAME", USER)
    monkeypatch.setenv("OPENREVIEW_PASSWORD", PASSWORD)
    cfg = config(tmp_path, pdf=True)
    with caplog.at_level(logging.INFO):
        for venue, url in ((V2, server.v2_url), (V1, server.v1_url)):
            result = ingest_venue(venue, cfg, tmp_path / venue.split("/")[0] / str(venue.split("/")[1]), url)
            assert result.papers == len(venues[venue].papers) and result.pdfs > 0
    assert server.logins == 1                               # one login, reused by both APIs and every worker
    [token] = _minted.values()
    secrets = (PASSWORD.encode(), token.encode())
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) > 20 and not [p for p in written if any(s in p.read_bytes() for s in secrets)]
    shown = caplog.text + "".join(capsys.readouterr())
    assert PASSWORD not in shown and token not in shown


def test_a_token_is_used_as_given_and_a_wrong_password_is_one_line_without_the_password(
        server, venues, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENREVIEW_TOKEN", server.issue_token())
    monkeypatch.setenv("OPENREVIEW_USERNAME", USER)       # a token wins: no login
    assert ingest_venue(V2, config(tmp_path), tmp_path / "a", server.v2_url).papers == len(venues[V2].papers)
    assert server.logins == 0
    monkeypatch.delenv("OPENREVIEW_TOKEN")
    monkeypatch.setenv("OPENREVIEW_PASSWORD", "not-the-password")
    with pytest.raises(AuthenticationError) as refused:
        ingest_venue(V2, config(tmp_path), tmp_path / "b", server.v2_url)
    message = str(refused.value)
    assert "\n" not in message and "not-the-password" not in message
    assert message.startswith(f"OpenReview login as {USER} failed (Error: Invalid username or password)")
    monkeypatch.delenv("OPENREVIEW_PASSWORD")
    with pytest.raises(AuthenticationError, match="needs both OPENREVIEW_USERNAME and OPENREVIEW_PASSWORD"):
        ingest_venue(V2, config(tmp_path), tmp_path / "c", server.v2_url)


# ---- versions ---------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("probe", [False, True])
def test_a_v2_venue_with_hidden_history_is_ingested_and_says_what_it_could_not_read(
        probe, server, venues, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENREVIEW_TOKEN", server.issue_token())
    venue = venues[V2]
    cfg = config(tmp_path, pdf=True, probe_hidden_histories=probe)
    result = ingest_venue(V2, cfg, tmp_path / "ingest", server.v2_url)
    # the venue facts say the history is hidden: asked only when probing, and the answer is the same
    assert (server.count(2, "edits") > 0) == probe and result.histories_fetched == server.count(2, "edits")
    papers = pl.read_parquet(tmp_path / "ingest" / "papers.parquet")
    reviews = pl.read_parquet(tmp_path / "ingest" / "reviews.parquet")
    active = papers.filter(pl.col("status") == "active")
    assert set(active["pdf_version"]) == {HIDDEN_PDF} and result.pdfs_hidden == active.height
    assert active["pdf_versions"].null_count() == active.height
    for paper_id in venue.revised["pdfs"]:                 # the latest PDF, said to be the latest
        paper = next(p for p in venue.papers if p.paper_id == paper_id)
        assert (tmp_path / "ingest" / "pdfs" / f"{paper_id}.pdf").read_bytes() == paper.current_pdf
    by_id = {r["review_id"]: r for r in reviews.iter_rows(named=True)}
    for review_id in venue.revised["reviews"]:             # the final version, said to be the final one
        row = by_id[review_id]
        assert row["review_history"] == REVIEW_HIDDEN and row["edited_after_rebuttal"] is None
        assert row["rating"] == row["rating_final"] and "After the rebuttal" in row["review_text"]
    assert result.reviews_hidden == len(venue.revised["reviews"])
    assert {r["review_history"] for r in by_id.values() if r["review_id"] not in venue.revised["reviews"]
            and r["paper_id"] in set(active["paper_id"])} == {REVIEW_ONE}
    assert all(r["rating_raw"].isdigit() for r in by_id.values())          # the integer-score form
    # a superseded PDF of a v2 venue is not served
    paper_id = venue.revised["pdfs"][0]
    answer = requests.get(f"{server.v2_url}/notes/edits/attachment", params={"id": f"{paper_id}E0", "name": "pdf"},
                          headers={"User-Agent": "openreview-py/test", "Authorization": f"Bearer {server.issue_token()}"})
    assert answer.status_code == 404

    curated = curate_venue(tmp_path / "ingest", V2, cfg, tmp_path / "curate")
    coverage = pl.read_parquet(tmp_path / "curate" / "version_coverage.parquet")
    counts = {(e, c): n for e, c, n in coverage.select("entity", "case", "ingested").iter_rows()}
    assert counts[("paper", HIDDEN_PDF)] == active.height
    assert counts[("review", REVIEW_HIDDEN)] == len(venue.revised["reviews"])
    assert sum(n for (e, _), n in counts.items() if e == "review") == reviews.height
    assert curated.versions[f"review: {REVIEW_HIDDEN}"] == coverage.filter(
        pl.col("case") == REVIEW_HIDDEN)["kept"].item()
    limits = pl.read_parquet(tmp_path / "curate" / "source_limits.parquet")["limit"].to_list()
    assert any(limit.startswith(f"edit history not public for {active.height} of {papers.height} papers")
               for limit in limits)
    assert any("scores overwritten in place" in limit for limit in limits)   # the venue facts' statement


def test_a_v1_venue_keeps_the_pdf_its_reviewers_saw(server, venues, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENREVIEW_TOKEN", server.issue_token())
    venue = venues[V1]
    result = ingest_venue(V1, config(tmp_path, pdf=True), tmp_path / "out", server.v1_url)
    papers = {p["paper_id"]: p for p in pl.read_parquet(tmp_path / "out" / "papers.parquet").iter_rows(named=True)}
    assert result.pdfs_hidden == 0 and result.pdfs_revised == len(venue.revised["pdfs"]) > 0
    for paper_id in venue.revised["pdfs"]:
        paper = next(p for p in venue.papers if p.paper_id == paper_id)
        assert papers[paper_id]["pdf_version"] == f"{paper_id}R0" and papers[paper_id]["pdf_versions"] == 2
        assert (tmp_path / "out" / "pdfs" / f"{paper_id}.pdf").read_bytes() == paper.pdf_history()[0][1]


# ---- rate limits ------------------------------------------------------------------------------------------
def test_an_html_429_and_a_429_with_a_reset_time_are_waited_out(server, venues, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("OPENREVIEW_TOKEN", server.issue_token())
    server.inject(Fault("429", html=True, retry_after=None, times=2),
                  Fault("429", endpoint="edits", reset_in=0.8, retry_after=None))
    with caplog.at_level(logging.WARNING, logger="tasks.stages.ingest.openreview_client"):
        result = ingest_venue(OTHER, config(tmp_path, pdf=True), tmp_path / "out", server.v2_url)
    assert result.papers == len(venues[OTHER].papers) and result.pdfs > 0
    assert caplog.text.count("HTML answer from the firewall") == 2
    assert "the limit resets in" in caplog.text
    edits = [r for r in server.log if r.endpoint == "edits"]
    limited = next(i for i, r in enumerate(edits) if r.status == 429)
    retry = next(r for r in edits[limited + 1:] if r.params == edits[limited].params)
    assert retry.status == 200 and retry.at - edits[limited].at >= 0.7      # waited for the reset time
    # the firewall answers clients without the library's User-Agent with an HTML page, PDFs included
    plain = requests.get(f"{server.v2_url}/pdf", params={"id": venues[V2].papers[0].paper_id})
    assert plain.status_code == 429 and plain.headers["Content-Type"].startswith("text/html")


def test_a_limit_resetting_too_late_or_429s_past_the_retries_stop_in_one_line(server, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENREVIEW_TOKEN", server.issue_token())
    server.inject(Fault("429", reset_in=3600, retry_after=None))
    with pytest.raises(RateLimited) as late:
        ingest_venue(OTHER, config(tmp_path, max_rate_wait_seconds=5), tmp_path / "a", server.v2_url)
    assert "\n" not in str(late.value) and "later than [ingest] max_rate_wait_seconds = 5: rerun after" in str(late.value)
    assert server.count(2, "notes") == 1                          # not retried: the wait would be an hour
    server.inject(Fault("429", html=True, retry_after=None, times=100))
    with pytest.raises(RateLimited, match=r"kept answering 429 \(rate limited\) for /v2/notes past the retries"):
        ingest_venue(OTHER, config(tmp_path, max_retries=1), tmp_path / "b", server.v2_url)
    assert is_retryable(RateLimited("x"))                          # a later task retry may get through


def test_per_endpoint_limits_answer_their_reset_time_and_the_run_completes(venues, tmp_path, monkeypatch):
    with serve_venues(venues.values(), page_limit=5, policy=today(limits={"edits": (2, 1.0)})) as srv:
        monkeypatch.setenv("OPENREVIEW_TOKEN", srv.issue_token())
        result = ingest_venue(OTHER, config(tmp_path), tmp_path / "out", srv.v2_url)
        limited = [r for r in srv.log if r.status == 429]
    assert limited and {r.endpoint for r in limited} == {"edits"}           # notes were not limited
    assert result.histories_fetched == len([r for r in srv.log if r.endpoint == "edits" and r.status == 200])
    assert srv.fetched_twice() == []


# ---- what a venue exposes ---------------------------------------------------------------------------------
def test_an_accepted_only_venue_is_stated_in_source_limits(server, venues, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENREVIEW_TOKEN", server.issue_token())
    cfg = config(tmp_path)
    result = ingest_venue(NIPS, cfg, tmp_path / "ingest", server.v2_url)
    accepted = [p for p in venues[NIPS].papers if (p.decision or "").startswith("Accept")]
    papers = pl.read_parquet(tmp_path / "ingest" / "papers.parquet")
    assert 0 < result.papers == len(accepted) < len(venues[NIPS].papers)
    assert set(papers["paper_id"]) == {p.paper_id for p in accepted}
    curated = curate_venue(tmp_path / "ingest", NIPS, cfg, tmp_path / "curate")
    assert any("rejected papers private" in limit for limit in curated.source_limits)
    stated = pl.read_parquet(tmp_path / "curate" / "source_limits.parquet")["limit"].to_list()
    assert list(curated.source_limits) == stated


def test_venues_lists_a_years_venues_from_the_group_tree_with_what_each_exposes(server):
    result = runner.invoke(app, ["venues", "--year", "2025", "--url", server.v2_url])   # a guest: /groups answers
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"3 venue(s) of 2025 at {server.v2_url}:"
    assert f"- {OTHER}: no facts recorded: add them to tasks/core/venue_families.toml, with sources" in lines
    assert any(line.startswith(f"- {V2} [ICLR, API v2, listed by invitation {V2}/-/Submission, integer scores, "
                               "reviews public from 2024-11-15]") for line in lines)
    assert any(line.startswith(f"- {NIPS} [NeurIPS") for line in lines)
    assert any("rejected papers private" in line for line in lines) and V1 not in result.output
    rows = json.loads(runner.invoke(app, ["venues", "--year", "2023", "--url", server.v2_url, "--json"]).output)
    assert [(r["venue_id"], r["api"], r["scores"]) for r in rows] == [(V1, "v1", "string")]
    assert runner.invoke(app, ["venues", "--year", "20251", "--url", server.v2_url]).exit_code == 2


def test_venues_says_in_one_line_when_the_api_does_not_answer(tmp_path):
    (tmp_path / "pipelines.toml").write_text("[ingest]\nmax_retries = 0\ntimeout_seconds = 2\n")
    result = runner.invoke(app, ["venues", "--url", "http://127.0.0.1:9/v2", "-c", str(tmp_path / "pipelines.toml")])
    assert result.exit_code == 2
    assert result.output.strip() == "error: http://127.0.0.1:9/v2: OpenReview did not answer (ConnectionError)"


def test_a_paced_run_spaces_pdfs_as_configured_and_shows_progress_with_an_eta(server, venues, tmp_path, monkeypatch,
                                                                               capsys):
    monkeypatch.setenv("OPENREVIEW_TOKEN", server.issue_token())
    monkeypatch.setenv("GREBENCH_PROGRESS_SECONDS", "0.2")
    cfg = config(tmp_path, pdf=True, api_v2_url=server.v2_url, logged_in_pdfs_per_hour=18_000)   # one per 0.2 s
    result = ingest_venue(V2, cfg, tmp_path / "out")                  # the real-API path: paced from [ingest]
    pdfs = sorted(r.at for r in server.log if r.endpoint == "pdf")
    assert len(pdfs) == result.pdfs > 5
    # the throttle spaces the sends; arrival times at the server jitter with the machine's load, so
    # the pace is checked over the whole run, and no two PDFs may arrive as a burst
    assert pdfs[-1] - pdfs[0] >= 0.19 * (len(pdfs) - 1)
    assert min(b - a for a, b in zip(pdfs, pdfs[1:], strict=False)) >= 0.1
    progress = [line for line in capsys.readouterr().err.splitlines() if line.startswith(f"PDFs of {V2}")]
    assert progress and all("<" in line and "pdf/s]" in line for line in progress)   # elapsed < ETA
