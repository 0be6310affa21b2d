"""Logins that outlast the run and never prompt, through the real openreview-py client against the
local server: a minted token expiring mid-run is minted again (nothing fetched twice), a two-factor
account logs in with OPENREVIEW_TOTP_SECRET and stops in one line without it (in a terminal too),
`grebench login --check`, and the refresh's login check when scheduled and when it fires."""

from __future__ import annotations

import contextlib
import logging
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import prefect
import pyotp
import pytest
from typer.testing import CliRunner

import flows.refresh
from flows.cli.main import app
from tasks.core.config import Config, IngestConfig, VenueConfig
from tasks.core.errors import AuthenticationError
from tasks.stages.ingest import auth
from tasks.stages.ingest.auth import _minted, scrub
from tasks.stages.ingest.fetch import ingest_venue
from tasks.stages.ingest.login_check import token_claims
from tasks.testing.openreview_server import Policy, serve_venues
from tasks.testing.pipelines import ingest_pipeline
from tasks.testing.synthetic import make_venue

ROOT = Path(__file__).resolve().parents[3]
V2 = "ICLR.cc/2025/Conference"
USER, PASSWORD = "reviewer@example.org", "pw-Secret-4711"
SECRET = pyotp.random_base32()
ENV = ("OPENREVIEW_TOKEN", "OPENREVIEW_USERNAME", "OPENREVIEW_PASSWORD", "OPENREVIEW_TOTP_SECRET")
ONE_TO_TEN = {str(k): v for k, v in zip(range(1, 11), (1, 1, 3, 5, 5, 6, 8, 8, 10, 10), strict=True)}
runner = CliRunner()


pytestmark = pytest.mark.usefixtures("no_openreview_login")   # each test starts logged out (tests/conftest.py)


@pytest.fixture(scope="module")
def venue():
    return make_venue(V2, seed=1, bad_cases=False)


def serve(venue, **changes):
    policy = Policy.today(**{"accounts": {USER: PASSWORD}, "limits": {}, **changes})
    return serve_venues([venue], page_limit=5, policy=policy)


def config(root: Path, **ingest) -> Config:
    settings = dict(page_size=5, backoff_seconds=0.01, max_backoff_seconds=0.05, timeout_seconds=5,
                    max_retries=2, pdf_max_bytes=2_000_000, pdf_workers=3, pdf=True)
    return Config(root=root, ingest=IngestConfig(**{**settings, **ingest}), venues={V2: VenueConfig(rating_map=ONE_TO_TEN)})


def log_in(monkeypatch, totp: str | None = None) -> None:
    monkeypatch.setenv("OPENREVIEW_USERNAME", USER)
    monkeypatch.setenv("OPENREVIEW_PASSWORD", PASSWORD)
    if totp is not None:
        monkeypatch.setenv("OPENREVIEW_TOTP_SECRET", totp)


def answered(log) -> list[tuple]:
    """(endpoint, query) of every data request answered 200 (logins and profiles left out)."""
    return [(r.api, r.endpoint, tuple(sorted(r.params.items()))) for r in log
            if r.status == 200 and r.endpoint not in ("login", "mfa_verify", "profiles")]


# ---- a token expiring mid-run --------------------------------------------------------------------------------
def test_a_minted_token_expiring_mid_run_is_minted_again_and_nothing_is_fetched_twice(
        venue, tmp_path, monkeypatch, caplog):
    log_in(monkeypatch)
    with serve(venue, token_uses=4) as server, caplog.at_level(logging.INFO):   # a token answers 4 requests
        # one PDF worker: a token counted in requests must not be used up by others before a retry
        result = ingest_venue(V2, config(tmp_path, pdf_workers=1), tmp_path / "out", server.v2_url)
        log = list(server.log)
        logins = server.logins
    assert result.papers == len(venue.papers) and result.pdfs > 0
    fetched = answered(log)
    assert len(fetched) > 2 * 4 and len(fetched) == len(set(fetched))        # nothing fetched twice
    refused = [r for r in log if r.status == 401]
    assert refused and logins >= len(fetched) // 4                           # several expiries, each renewed
    for record in refused:                                                    # each refused request: once more
        key = (record.api, record.endpoint, tuple(sorted(record.params.items())))
        assert key in fetched
    assert "logged in again" in caplog.text and PASSWORD not in caplog.text
    assert not [t for t in auth._spent if t in caplog.text]


def test_workers_refused_at_once_share_one_new_login(venue, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    log_in(monkeypatch)
    with serve(venue) as server:
        login = auth.current_login(server.v2_url, 2)
        with ThreadPoolExecutor(6) as pool:
            fresh = set(pool.map(lambda _: auth.renew(login, login.token), range(6)))
        assert len(fresh) == 1 and login.token not in fresh and server.logins == 2
        assert auth.token_now(login) in fresh and auth.renew(auth.Login("t", "token"), "t") is None


def test_a_token_from_the_environment_is_never_renewed(venue, tmp_path, monkeypatch):
    with serve(venue) as server:
        token = server.issue_token()
        server.expire_token(token, after=3)
        monkeypatch.setenv("OPENREVIEW_TOKEN", token)
        log_in(monkeypatch)                                   # a token wins: no login, no renewal
        with pytest.raises(AuthenticationError) as refused:
            ingest_venue(V2, config(tmp_path), tmp_path / "out", server.v2_url)
        assert server.logins == 0
    line = str(refused.value)
    assert line.startswith("OpenReview refused OPENREVIEW_TOKEN (TokenExpiredError: Token has expired.")
    assert "\n" not in line and token not in line


def test_login_caps_the_lifetime_at_a_week_and_a_short_lived_token_is_refused_once_expired(venue):
    import requests

    agent = {"User-Agent": "openreview-py/test"}
    with serve(venue, token_lifetime=1) as short, serve(venue) as server:
        def login(url: str, **sent) -> str:
            return requests.post(f"{url}/login", json={"id": USER, "password": PASSWORD, **sent}, headers=agent
                                 ).json()["token"]

        claims = token_claims(login(server.v2_url, expiresIn=30 * 24 * 3600))
        assert claims["exp"] - claims["iat"] == 7 * 24 * 3600 and claims["user"]["id"] == USER
        hour = token_claims(login(server.v2_url))
        assert hour["exp"] - hour["iat"] == 3600                          # the default lifetime: an hour
        token = login(short.v2_url, expiresIn=3600)
        time.sleep(1.1)
        answer = requests.get(f"{short.v2_url}/notes", params={"id": "x"},
                              headers={**agent, "Authorization": f"Bearer {token}"})
        assert answer.status_code == 401 and answer.json()["name"] == "TokenExpiredError"


# ---- two-factor accounts ---------------------------------------------------------------------------------------
def test_a_two_factor_account_logs_in_with_its_totp_secret_and_no_secret_or_code_shows(
        venue, tmp_path, monkeypatch, caplog, capsys):
    log_in(monkeypatch, SECRET)
    with serve(venue, second_factor={USER: SECRET}) as server, caplog.at_level(logging.DEBUG):
        result = ingest_venue(V2, config(tmp_path, pdf=False), tmp_path / "out", server.v2_url)
        assert result.papers == len(venue.papers)
        assert server.logins == 1 and server.count(2, "mfa_verify") == 1
    code = next(iter(auth._codes))
    shown = caplog.text + "".join(capsys.readouterr())
    assert SECRET not in shown and PASSWORD not in shown and not [t for t in _minted.values() if t in shown]
    written = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert SECRET.encode() not in written and PASSWORD.encode() not in written
    assert scrub(f"secret {SECRET} code {code} count 1{code}") == f"secret *** code *** count 1{code}"


@pytest.mark.parametrize("secret, expected", [
    (None, f"OpenReview asks the account {USER} for a second factor (totp) and no command here prompts for one: "
           "set OPENREVIEW_TOTP_SECRET"),
    (pyotp.random_base32(), f"OpenReview login as {USER} failed (MfaError: Invalid verification code)"),
    ("not base32!", "OPENREVIEW_TOTP_SECRET is not a usable TOTP secret ("),
    ("JBSWY3DPEHPK3PXP", "OPENREVIEW_TOTP_SECRET is not a usable TOTP secret (Secrets must be at least 112 bits"),
], ids=["no-secret", "another-accounts-secret", "not-base32", "too-short"])   # ids stable across xdist workers
def test_a_two_factor_account_without_a_usable_secret_stops_in_one_line(venue, tmp_path, monkeypatch, secret,
                                                                        expected):
    log_in(monkeypatch, secret)
    with serve(venue, second_factor={USER: SECRET}) as server:
        with pytest.raises(AuthenticationError) as refused:
            ingest_venue(V2, config(tmp_path), tmp_path / "out", server.v2_url)
        assert answered(server.log) == []
    line = str(refused.value)
    assert line.startswith(expected) and "\n" not in line and PASSWORD not in line
    assert secret is None or secret not in line


def in_a_terminal(command: list[str], env: dict[str, str], seconds: float = 120.0, until: str | None = None
                  ) -> tuple[int | None, str]:
    """Run `command` with stdin, stdout and stderr a pseudo-terminal; (exit status, output). The status
    is None when it was still running after `seconds`, or when it wrote `until` (then it is killed:
    e.g. waiting on a prompt)."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(command, stdin=follower, stdout=follower, stderr=follower, cwd=ROOT, env=env,
                               start_new_session=True)
    os.close(follower)
    output, deadline = b"", time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            chunk = b""
            if select.select([leader], [], [], 0.2)[0]:
                with contextlib.suppress(OSError):     # EIO: the terminal's last writer is gone
                    chunk = os.read(leader, 4096)
            output += chunk
            if (not chunk and process.poll() is not None) or (until and until.encode() in output):
                break
        status = process.poll()
        if status is None:
            process.kill()
        process.wait(timeout=10)
    finally:
        os.close(leader)
    return status, output.decode(errors="replace").replace("\r\n", "\n")


def child_env(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ENV}
    return {**env, "PYTHONPATH": str(ROOT), "DO_NOT_TRACK": "1", **values}


def test_in_a_terminal_grebench_never_prompts_for_a_second_factor(venue, project_config):
    with serve(venue, second_factor={USER: SECRET}) as server:
        path = refresh_config(project_config, server)
        env = child_env(OPENREVIEW_USERNAME=USER, OPENREVIEW_PASSWORD=PASSWORD)
        # the control: the library itself, in the same terminal, asks for a code and waits
        library = (f"from openreview.api import OpenReviewClient; OpenReviewClient(baseurl={server.v2_url!r}, "
                   f"username={USER!r}, password={PASSWORD!r})")
        waited, prompt = in_a_terminal([sys.executable, "-c", library], env, seconds=60, until="Enter TOTP code")
        assert waited is None and "Enter TOTP code" in prompt
        status, output = in_a_terminal([sys.executable, "-m", "flows.cli.main", "login", "--check", "-c", str(path)],
                                       env)
    assert status == 2, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert lines == [f"error: OpenReview asks the account {USER} for a second factor (totp) and no command here "
                     "prompts for one: set OPENREVIEW_TOTP_SECRET to the account's authenticator (TOTP) secret, or "
                     "set OPENREVIEW_TOKEN to a token of a logged-in session"]
    assert "Enter TOTP" not in output and "Traceback" not in output and PASSWORD not in output


# ---- grebench login --check, schedule, and the refresh when it fires --------------------------------------------
def refresh_config(project_config, server) -> Path:
    return project_config(ingest_pipeline("refresh", "ICLR.cc/{year}/Conference", server.v1_url, server.v2_url,
                                          max_retries=1, backoff_seconds=0.01))


def test_login_check_says_who_and_until_when_and_fails_in_one_line(venue, project_config, monkeypatch):
    with serve(venue, second_factor={USER: SECRET}) as server:
        path = refresh_config(project_config, server)
        refused = runner.invoke(app, ["login", "--check", "-c", str(path)])
        assert refused.exit_code == 2 and refused.output.strip() == (
            f"error: no OpenReview login for {server.v2_url}: OpenReview refuses guests; set OPENREVIEW_TOKEN, "
            "or OPENREVIEW_USERNAME and OPENREVIEW_PASSWORD")
        log_in(monkeypatch, SECRET)
        checked = runner.invoke(app, ["login", "--check", "-c", str(path)])
        assert checked.exit_code == 0, checked.output
        [line] = checked.output.splitlines()                       # v1 and v2 share the local host's login
        assert line.startswith(f"{server.url}: logged in as {USER} (~Reviewer1) with OPENREVIEW_USERNAME and "
                               "OPENREVIEW_PASSWORD and OPENREVIEW_TOTP_SECRET; the token expires ")
        assert "(in 6 d 23 h)" in line and server.logins == 1
        assert not [s for s in (PASSWORD, SECRET, *_minted.values()) if s in checked.output]

        for name in ENV:
            monkeypatch.delenv(name, raising=False)
        token = server.issue_token(user=USER)
        monkeypatch.setenv("OPENREVIEW_TOKEN", token)
        by_token = runner.invoke(app, ["login", "--check", "-c", str(path)])
        assert by_token.exit_code == 0 and by_token.output.startswith(f"{server.url}: logged in as {USER} (~Reviewer1) "
                                                                      "with OPENREVIEW_TOKEN; the token expires ")
        assert "it is not renewed" in by_token.output and token not in by_token.output
        server.expire_token(token)
        expired = runner.invoke(app, ["login", "--check", "-c", str(path)])
        assert expired.exit_code == 2 and expired.output.startswith(
            "error: OpenReview refused OPENREVIEW_TOKEN (TokenExpiredError: Token has expired.")
        assert len(expired.output.splitlines()) == 1 and token not in expired.output
    assert runner.invoke(app, ["login", "-c", str(path)]).exit_code == 2      # nothing to do without --check


@pytest.mark.slow
def test_schedule_checks_the_login_before_serving_and_its_dry_run_needs_none(venue, project_config, monkeypatch):
    served = []
    monkeypatch.setattr(prefect, "serve", lambda *deployments: served.append(deployments))
    with serve(venue) as server:
        path = refresh_config(project_config, server)
        dry = runner.invoke(app, ["schedule", "--dry-run", "-c", str(path)])
        assert dry.exit_code == 0 and "credentials set: none (not checked in a dry run)" in dry.output
        refused = runner.invoke(app, ["schedule", "-c", str(path)])
        assert refused.exit_code == 2 and served == []
        assert refused.output.splitlines()[-1].startswith("error: no OpenReview login for ")
        token = server.issue_token(lifetime=3600)                  # gone long before 15 December
        monkeypatch.setenv("OPENREVIEW_TOKEN", token)
        short = runner.invoke(app, ["schedule", "-c", str(path)])
        assert short.exit_code == 2 and served == [] and "before the first scheduled run" in short.output
        monkeypatch.delenv("OPENREVIEW_TOKEN")
        log_in(monkeypatch)
        dry = runner.invoke(app, ["schedule", "--dry-run", "-c", str(path)])
        assert "credentials set: OPENREVIEW_USERNAME, OPENREVIEW_PASSWORD (not" in dry.output
        assert PASSWORD not in dry.output and server.logins == 0
        scheduled = runner.invoke(app, ["schedule", "-c", str(path)])
        assert scheduled.exit_code == 0, scheduled.output
        assert len(served) == 1 and f"{server.url}: logged in as {USER}" in scheduled.output
        assert PASSWORD not in scheduled.output


def test_the_refresh_checks_its_login_when_it_fires_before_any_work(venue, project_config, monkeypatch):
    calls = []
    monkeypatch.setattr(flows.refresh, "pipeline_flow", lambda **kwargs: calls.append(kwargs) or {})
    monkeypatch.setattr(flows.refresh, "write_site", lambda cfg, pipeline: None)
    with serve(venue) as server:
        path = refresh_config(project_config, server)
        with pytest.raises(AuthenticationError, match="no OpenReview login for"):
            flows.refresh.refresh_flow.fn(year=2025, config_path=str(path))
        monkeypatch.setenv("OPENREVIEW_USERNAME", USER)
        monkeypatch.setenv("OPENREVIEW_PASSWORD", "wrong")
        with pytest.raises(AuthenticationError, match=f"OpenReview login as {USER} failed"):
            flows.refresh.refresh_flow.fn(year=2025, config_path=str(path))
        assert calls == [] and answered(server.log) == []
        log_in(monkeypatch)
        flows.refresh.refresh_flow.fn(year=2025, config_path=str(path))
        assert len(calls) == 1 and server.logins == 1 and len(_minted) == 1   # the run reuses this login
