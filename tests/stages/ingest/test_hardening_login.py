"""Credentials a hostile or careless environment gives: a token with a line break or a non-ASCII
character stops in one line that never shows it, no log record or file a run writes (Prefect's
database and its WAL included) holds it, and `login --check` says "logged in" only when the
service said who the login is (a server error is not a login)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli.main import app
from tasks.core.errors import AuthenticationError
from tasks.stages.ingest.auth import checked_token, current_login, scrub, scrub_log_records
from tasks.testing.openreview_server import Fault, Policy, serve_venues
from tasks.testing.synthetic import make_venue

ROOT = Path(__file__).resolve().parents[3]
HEAD, TAIL = "tokHEAD-5d1f0c9a7b", "tokTAIL-e3a94b2c61"
BROKEN = f"{HEAD}\n{TAIL}"          # a token pasted with a line break in it
runner = CliRunner()

pytestmark = pytest.mark.usefixtures("no_openreview_login")


@pytest.fixture(scope="module")
def server():
    with serve_venues([make_venue("ICLR.cc/2025/Conference", n_papers=4, seed=3, bad_cases=False)], page_limit=5,
                      policy=Policy.today(limits={})) as srv:
        yield srv


def config(project_config, server, stages: str = '"ingest"') -> Path:
    return project_config(f"""
[pipelines.refresh]
source = "openreview"
venues = ["ICLR.cc/{{year}}/Conference"]
stages = [{stages}]

[pipelines.leak]
source = "openreview"
venues = ["ICLR.cc/2025/Conference"]
stages = [{stages}]

[pipelines.leak.ingest]
api_v1_url = "{server.v1_url}"
api_v2_url = "{server.v2_url}"
max_retries = 1
backoff_seconds = 0.01

[pipelines.refresh.ingest]
api_v1_url = "{server.v1_url}"
api_v2_url = "{server.v2_url}"
max_retries = 1
backoff_seconds = 0.01
""")


def cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flows.cli.main", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env}, timeout=300)


@pytest.mark.parametrize(("token", "what"), [(BROKEN, "a line break at character 19"),
                                              (f"{HEAD}é{TAIL}", "a non-ASCII character at character 19"),
                                              (f"{HEAD}\x1b[2J", "a control character at character 19")])
def test_a_token_no_header_can_carry_stops_in_one_line_without_showing_it(token, what, monkeypatch):
    monkeypatch.setenv("OPENREVIEW_TOKEN", token)
    with pytest.raises(AuthenticationError) as raised:
        current_login("http://127.0.0.1:9", 2)
    message = str(raised.value)
    assert what in message and "\n" not in message and HEAD not in message and TAIL not in message
    assert checked_token(HEAD) == HEAD


def test_scrub_blanks_a_broken_token_as_it_is_as_repr_writes_it_and_each_piece(monkeypatch):
    monkeypatch.setenv("OPENREVIEW_TOKEN", BROKEN)
    for text in (f"header {BROKEN!r}", f"got {BROKEN}", f"a piece: {TAIL}", f'json "{HEAD}\\n{TAIL}"'):
        assert HEAD not in scrub(text) and TAIL not in scrub(text), text


def test_every_log_record_is_scrubbed_its_traceback_too(monkeypatch, caplog):
    monkeypatch.setenv("OPENREVIEW_TOKEN", BROKEN)
    scrub_log_records()
    log = logging.getLogger("tests.leak")
    with caplog.at_level(logging.INFO, logger="tests.leak"):
        log.info("sending %r", BROKEN)
        try:
            raise ValueError(f"Invalid header value {BROKEN!r}")
        except ValueError:
            log.exception("request failed")
    assert caplog.text and HEAD not in caplog.text and TAIL not in caplog.text


def test_login_check_with_a_broken_token_is_one_line_and_never_shows_it(server, project_config, tmp_path):
    path = config(project_config, server)
    out = cli("login", "--check", "-c", str(path), cwd=tmp_path, env={"OPENREVIEW_TOKEN": BROKEN})
    assert out.returncode == 2 and out.stdout == "" and out.stderr.count("\n") == 1, out.stderr
    assert "OPENREVIEW_TOKEN holds a line break" in out.stderr
    assert HEAD not in out.stderr + out.stdout and TAIL not in out.stderr + out.stdout


def test_login_check_on_a_server_error_is_not_logged_in(server, project_config, monkeypatch):
    path = config(project_config, server)
    monkeypatch.setenv("OPENREVIEW_TOKEN", server.issue_token())
    server.inject(Fault("5xx", times=2, endpoint="profiles", status=431))
    answered = runner.invoke(app, ["login", "--check", "-c", str(path)])
    assert answered.exit_code == 2 and "logged in" not in answered.output, answered.output
    assert answered.output.startswith(f"error: OpenReview at {server.v2_url} answered 431") and \
        "the login was not checked" in answered.output and len(answered.output.splitlines()) == 1
    server.clear()
    assert runner.invoke(app, ["login", "--check", "-c", str(path)]).exit_code == 0


@pytest.mark.slow
def test_no_file_a_run_writes_holds_the_token_prefect_database_included(server, project_config, tmp_path):
    path = config(project_config, server)
    home = tmp_path / "prefect"
    out = cli("run", "leak", "-c", str(path), cwd=tmp_path,
              env={"OPENREVIEW_TOKEN": BROKEN, "PREFECT_HOME": str(home), "PREFECT_API_URL": ""})
    assert out.returncode == 2, out.stderr[-3000:]
    assert "OPENREVIEW_TOKEN holds a line break" in out.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name.startswith("prefect.db") for p in written)          # the run did write Prefect's database
    for piece in (HEAD, TAIL):
        assert piece not in out.stdout + out.stderr
        holding = [p for p in written if piece.encode() in p.read_bytes()]
        assert not holding, holding


# A password with a quote, a backslash and a non-ASCII letter: JSON writes it as `\"`, `\\` and `\u00c4`,
# a form body as `%22`, `%5C` and `%C3%84`. Its two ASCII words show a leak in any encoding.
PASSWORD = 'Zebra"P\u00c4SS\\wQuokka91'


def leaked(text: str) -> bool:
    return "Zebra" in text or "Quokka91" in text


# The password of a hostile tester: a quote, a non-ASCII letter (one code point in NFC, two in NFD)
# and a carriage return; its two ASCII ends show a leak in any encoding.
ODD_PASSWORD = 'Yak42"v\u00c4\rsZebra99'


def odd_leaked(text: str) -> bool:
    return "Yak42" in text or "Zebra99" in text


def test_scrub_blanks_a_password_as_json_url_and_repr_carry_it(monkeypatch):
    import json
    from urllib.parse import quote, quote_plus

    monkeypatch.setenv("OPENREVIEW_PASSWORD", PASSWORD)
    body = json.dumps({"id": "me@x.org", "password": PASSWORD})
    for text in (body, json.dumps(body), f"{PASSWORD!r}", ascii(PASSWORD), quote(PASSWORD), quote_plus(PASSWORD),
                 json.dumps(PASSWORD).replace("\\u00c4", "\\u00C4"), quote(PASSWORD).lower()):
        assert not leaked(scrub(f"echoed: {text}")), text


# how the server echoes the login body: JSON, HTML entities, NFD, past a 200-character cut
ECHOES = [("json", PASSWORD), ("html", ODD_PASSWORD), ("nfd", ODD_PASSWORD), ("long", ODD_PASSWORD)]


@pytest.mark.parametrize(("echo_as", "password"), ECHOES)
def test_login_check_on_a_server_echoing_the_password_never_shows_it(server, project_config, tmp_path, echo_as,
                                                                     password):
    path = config(project_config, server)
    server.inject(Fault("echo", times=10, endpoint="login", echo_as=echo_as))
    try:
        out = cli("login", "--check", "-c", str(path), cwd=tmp_path,
                  env={"OPENREVIEW_USERNAME": "me@x.org", "OPENREVIEW_PASSWORD": password,
                       "PREFECT_HOME": str(tmp_path / "prefect")})
    finally:
        server.clear()
    assert out.returncode == 2 and out.stderr.startswith("error: OpenReview login as me@x.org failed"), out.stderr
    assert out.stderr.count("\n") == 1 and "Cannot parse" in out.stderr, out.stderr
    assert not leaked(out.stdout + out.stderr) and not odd_leaked(out.stdout + out.stderr), out.stderr


def test_login_check_on_a_200_without_a_profile_is_one_line(server, project_config, monkeypatch):
    path = config(project_config, server)
    monkeypatch.setenv("OPENREVIEW_TOKEN", server.issue_token())
    server.inject(Fault("no_profile", times=4, endpoint="profiles"))
    try:
        answered = runner.invoke(app, ["login", "--check", "-c", str(path)])
    finally:
        server.clear()
    assert answered.exit_code == 2 and "logged in" not in answered.output, answered.output
    assert answered.output.startswith("error: OpenReview at") and "without a profile" in answered.output
    assert len(answered.output.splitlines()) == 1 and not isinstance(answered.exception, KeyError)


@pytest.mark.slow
@pytest.mark.parametrize(("echo_as", "password"), ECHOES)
def test_no_file_a_run_writes_holds_an_echoed_password(server, project_config, tmp_path, echo_as, password):
    path = config(project_config, server)
    server.inject(Fault("echo", times=50, endpoint="login", echo_as=echo_as))
    try:
        out = cli("run", "leak", "-c", str(path), cwd=tmp_path,
                  env={"OPENREVIEW_USERNAME": "me@x.org", "OPENREVIEW_PASSWORD": password,
                       "PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_API_URL": ""})
    finally:
        server.clear()
    assert out.returncode == 2 and "Cannot parse" in out.stderr, out.stderr[-3000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in out.stderr and "stopped service" not in out.stderr, out.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name.startswith("prefect.db") for p in written)
    assert not leaked(out.stdout + out.stderr) and not odd_leaked(out.stdout + out.stderr)
    ends = (b"Zebra", b"Quokka91", b"Yak42", b"Zebra99")
    holding = [p for p in written if any(end in p.read_bytes() for end in ends)]
    assert not holding, holding


def test_scrub_blanks_a_password_as_html_entities_in_nfd_and_cut_short(monkeypatch):
    import html
    import unicodedata

    monkeypatch.setenv("OPENREVIEW_PASSWORD", ODD_PASSWORD)
    entities = html.escape(ODD_PASSWORD).encode("ascii", "xmlcharrefreplace").decode()
    nfd = unicodedata.normalize("NFD", ODD_PASSWORD)
    for text in (f"<p>{entities}</p>", entities.replace("&#196;", "&Auml;"), entities.replace("&#196;", "&#xC4;"),
                 html.escape(json.dumps({"password": ODD_PASSWORD})), nfd, json.dumps(nfd),
                 f"Cannot parse {'x' * 170} password={ODD_PASSWORD}"[:200], f"{ODD_PASSWORD[:7]}\u2026"):
        assert not odd_leaked(scrub(f"echoed: {text}")), text
    assert scrub("a plain line &amp; caf\u00e9") == "a plain line &amp; caf\u00e9"   # nothing to hide: untouched
