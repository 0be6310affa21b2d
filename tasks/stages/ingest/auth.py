"""Who the OpenReview clients are: a token, a login minted once per run, or a guest.

Since 2026 OpenReview refuses guests on the paths a crawl takes: `/notes` and `/notes/edits` on
API v1 and v2 answer `403 {"name": "ChallengeRequiredError", ...}` without a login, and only
`/groups` still answers (docs/openreview.md lists the sources). So a run needs an account:

- `OPENREVIEW_TOKEN` set: that token is sent as it is (`Authorization: Bearer ...`);
- else `OPENREVIEW_USERNAME` and `OPENREVIEW_PASSWORD`: one login per run and API host mints a
  token that lasts the longest the service allows (a week), and every client and worker of the
  run reuses it;
- else the clients are guests (the local server and `/groups` still answer guests).

A refusal stops the run with one line that says what to set (`AuthenticationError`): a challenge
(guest refused), an expired or unknown token (401), a failed login. Credentials never reach logs,
caches, the database or error text: messages are built from the service's error name and message
and passed through `scrub`, which blanks any credential value that might still be in them.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tasks.core.errors import AuthenticationError

TOKEN_ENV, USERNAME_ENV, PASSWORD_ENV = "OPENREVIEW_TOKEN", "OPENREVIEW_USERNAME", "OPENREVIEW_PASSWORD"
TOKEN_LIFETIME = 7 * 24 * 3600   # the longest a login token may last (openreview-py: tokenExpiresIn <= 1 week)
# API v1 hosts log in on their v2 sibling (openreview.Client.login_user does the same)
V2_OF = {"https://api.openreview.net": "https://api2.openreview.net",
         "https://api.dev.openreview.net": "https://api2.dev.openreview.net"}
WHAT_TO_SET = f"set {TOKEN_ENV}, or {USERNAME_ENV} and {PASSWORD_ENV}"


@dataclass(frozen=True)
class Login:
    """The identity one client uses: a bearer token, or None for a guest."""

    token: str | None = field(default=None, repr=False)
    source: str = "guest"          # "token" (OPENREVIEW_TOKEN) | "password" (minted this run) | "guest"
    username: str | None = None

    @property
    def logged_in(self) -> bool:
        return self.token is not None


_minted: dict[tuple[str, str], str] = {}
_lock = threading.Lock()


def secrets() -> list[str]:
    """The credential values of this process (for `scrub`), longest first."""
    values = [os.environ.get(TOKEN_ENV, ""), os.environ.get(PASSWORD_ENV, ""), *_minted.values()]
    return sorted({v.strip() for v in values if v and v.strip()}, key=len, reverse=True)


def scrub(text: str) -> str:
    """`text` with every credential value replaced by "***"."""
    for secret in secrets():
        text = text.replace(secret, "***")
    return text


def login_host(baseurl: str) -> str:
    """The host a token is minted on: API v1 hosts share their v2 sibling's login."""
    base = baseurl.rstrip("/")
    base = V2_OF.get(base, base)
    parts = urlsplit(base)
    return f"{parts.scheme}://{parts.netloc}"


def current_login(baseurl: str, api_version: int) -> Login:
    """The identity for a client of `baseurl` (see the module docstring); mints a token at most once
    per run and host."""
    token = os.environ.get(TOKEN_ENV, "").strip()
    if token:
        return Login(token.removeprefix("Bearer ").strip(), "token")
    username, password = os.environ.get(USERNAME_ENV, "").strip(), os.environ.get(PASSWORD_ENV, "")
    if not username and not password:
        return Login()
    if not (username and password):
        missing = PASSWORD_ENV if username else USERNAME_ENV
        raise AuthenticationError(f"OpenReview login needs both {USERNAME_ENV} and {PASSWORD_ENV}: {missing} "
                                  f"is not set (or set {TOKEN_ENV} instead)")
    key = (login_host(baseurl), username)
    with _lock:   # one login per run and host, whatever the number of workers
        if key not in _minted:
            _minted[key] = _mint(baseurl, api_version, username, password)
        return Login(_minted[key], "password", username)


def forget_minted() -> None:
    """Drop the tokens minted so far (a new run, or a test, logs in again)."""
    with _lock:
        _minted.clear()


def _mint(baseurl: str, api_version: int, username: str, password: str) -> str:
    """Log in through the real client and return its token; a refusal is one line, without secrets."""
    import openreview
    from openreview.api import OpenReviewClient

    base = baseurl.rstrip("/")
    try:
        if api_version == 2 or base in V2_OF:
            client: Any = OpenReviewClient(baseurl=V2_OF.get(base, base), username=username, password=password,
                                           tokenExpiresIn=TOKEN_LIFETIME)
        else:
            client = openreview.Client(baseurl=base, username=username, password=password,
                                       tokenExpiresIn=TOKEN_LIFETIME)
    except openreview.MfaRequiredException:
        raise AuthenticationError(f"OpenReview asks the account {username} for a second factor, which a batch "
                                  f"run cannot give: set {TOKEN_ENV} to a token of a logged-in session instead"
                                  ) from None
    except openreview.OpenReviewException as error:
        raise AuthenticationError(scrub(f"OpenReview login as {username} failed ({describe(error)}): check "
                                        f"{USERNAME_ENV} and {PASSWORD_ENV}, or set {TOKEN_ENV}")) from None
    except OSError as error:   # requests' connection errors are OSErrors
        raise AuthenticationError(scrub(f"OpenReview login at {base} failed: {type(error).__name__}")) from None
    if not client.token:
        raise AuthenticationError(f"OpenReview login as {username} returned no token")
    return str(client.token)


def describe(error: Any) -> str:
    """'Name: message' of an OpenReview error (its JSON body or the exception's first argument)."""
    body = error.args[0] if getattr(error, "args", None) else error
    if isinstance(body, dict):
        name, message = body.get("name") or "Error", body.get("message") or ""
        return f"{name}: {str(message)[:200]}" if message else str(name)
    return str(body)[:200]


def refusal(status: int, body: Any, login: Login) -> str | None:
    """The one line that stops the run for an answer `status` / `body`, or None when the answer is
    not about who we are (e.g. a 403 on one note's history: that note is private)."""
    name = body.get("name") if isinstance(body, dict) else None
    if status == 403 and name == "ChallengeRequiredError":
        if login.logged_in:
            return (f"OpenReview asked for a browser challenge although a token was sent ({login.source}); "
                    f"the token may be invalid: {WHAT_TO_SET} anew")
        return f"OpenReview refuses guests (403 ChallengeRequiredError): {WHAT_TO_SET}"
    if status == 401:
        what = describe(body) if isinstance(body, dict) else "401 Unauthorized"
        if login.source == "token":
            return (f"OpenReview refused OPENREVIEW_TOKEN ({what}): tokens last at most a week; set a fresh "
                    f"{TOKEN_ENV}, or unset it and set {USERNAME_ENV} and {PASSWORD_ENV}; a rerun resumes")
        if login.source == "password":
            return (f"OpenReview refused the token minted for {login.username} ({what}): rerun to log in "
                    f"again (the run resumes), or set {TOKEN_ENV}")
        return f"OpenReview asks for a login ({what}): {WHAT_TO_SET}"
    return None
