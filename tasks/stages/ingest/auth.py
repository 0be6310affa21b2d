"""Who the OpenReview clients are: a token, a login minted per run (and again when it expires), or a guest.

Since 2026 OpenReview refuses guests on the paths a crawl takes: `/notes` and `/notes/edits` on
API v1 and v2 answer `403 {"name": "ChallengeRequiredError", ...}` without a login, and only
`/groups` still answers (docs/openreview.md lists the sources). So a run needs an account:

- `OPENREVIEW_TOKEN` set: that token is sent as it is (`Authorization: Bearer ...`);
- else `OPENREVIEW_USERNAME` and `OPENREVIEW_PASSWORD`: one login per run and API host mints a
  token that lasts the longest the service allows (a week), and every client and worker of the
  run reuses it. When the service refuses that token (401: it expired, a crawl of several days
  outlives any token) the first worker to see the refusal logs in again (`renew`) and every
  client sends the new token from then on;
- `OPENREVIEW_TOTP_SECRET` (the base32 secret behind an authenticator app) answers the second
  factor of an account with two-factor login: codes come from `pyotp`;
- else the clients are guests (the local server and `/groups` still answer guests).

Nothing here ever waits on a person: openreview-py would prompt on a terminal (`input()`) or open
a browser for a passkey when an account asks for a second factor it was not given; inside our
login its interactivity check is forced off, so such an account stops with one line instead.

A refusal stops the run with one line that says what to set (`AuthenticationError`): a challenge
(guest refused), an expired token that cannot be renewed, a failed login. Credentials never reach
logs, caches, the database or error text: messages are built from the service's error name and
message and passed through `scrub`, which blanks any credential value that might still be in them
(tokens, the password, the TOTP secret and the codes made from it).
"""

from __future__ import annotations

import html
import json
import logging
import os
import re
import threading
import traceback
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any
from urllib.parse import quote, quote_plus, urlsplit

from tasks.core.errors import AuthenticationError

TOKEN_ENV, USERNAME_ENV, PASSWORD_ENV = "OPENREVIEW_TOKEN", "OPENREVIEW_USERNAME", "OPENREVIEW_PASSWORD"
TOTP_ENV = "OPENREVIEW_TOTP_SECRET"
CREDENTIAL_ENVS = (TOKEN_ENV, USERNAME_ENV, PASSWORD_ENV, TOTP_ENV)
TOKEN_LIFETIME = 7 * 24 * 3600   # the longest a login token may last (openreview-py: tokenExpiresIn <= 1 week)
# API v1 hosts log in on their v2 sibling (openreview.Client.login_user does the same)
V2_OF = {"https://api.openreview.net": "https://api2.openreview.net",
         "https://api.dev.openreview.net": "https://api2.dev.openreview.net"}
WHAT_TO_SET = f"set {TOKEN_ENV}, or {USERNAME_ENV} and {PASSWORD_ENV}"
MIN_SECRET_PIECE = 6      # pieces of a credential broken by white space this long or longer are scrubbed too


@dataclass(frozen=True)
class Login:
    """The identity one client uses: a bearer token, or None for a guest."""

    token: str | None = field(default=None, repr=False)
    source: str = "guest"          # "token" (OPENREVIEW_TOKEN) | "password" (minted this run) | "guest"
    username: str | None = None
    host: str | None = None        # the login host of a minted token (`login_host`)

    @property
    def logged_in(self) -> bool:
        return self.token is not None


_minted: dict[tuple[str, str], str] = {}            # (login host, username) -> the token in use
_origins: dict[tuple[str, str], tuple[str, int]] = {}   # the same key -> (base URL, API version) it was minted at
_spent: set[str] = set()                            # tokens the service refused (still scrubbed)
_codes: set[str] = set()                            # second-factor codes made in this process
_lock = threading.RLock()


def secrets() -> list[str]:
    """The credential values of this process (for `scrub`), longest first."""
    values = [os.environ.get(TOKEN_ENV, ""), os.environ.get(PASSWORD_ENV, ""), os.environ.get(TOTP_ENV, ""),
              *_minted.values(), *_spent]
    return sorted({v.strip() for v in values if v and v.strip()}, key=len, reverse=True)


def _encodings(text: str) -> set[str]:
    """`text` as a message can carry it: as it is, as repr() / ascii() escape it, as JSON writes it
    (`\\"`, `\\\\`, `\\uXXXX` in either case of hex, or UTF-8 kept), and URL-encoded (a form body, a query)."""
    json_ascii = json.dumps(text)[1:-1]
    forms = {text, repr(text)[1:-1], ascii(text)[1:-1], text.encode("unicode_escape").decode("ascii"),
             json_ascii, json.dumps(text, ensure_ascii=False)[1:-1],
             re.sub(r"\\u[0-9a-f]{4}", lambda m: "\\u" + m.group()[2:].upper(), json_ascii),
             quote(text, safe=""), quote_plus(text, safe="")}
    forms |= {re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), f) for f in forms if "%" in f}
    return {f for f in forms if f}


@lru_cache(maxsize=64)
def _forms(secret: str) -> list[str]:
    """The ways `secret` can appear in text: in either Unicode normal form (NFC, NFD), every encoding
    of `_encodings`, each once more (a JSON body quoted inside another JSON or repr), and, for a value
    broken by white space (a token with a line break), each long piece of it in each encoding."""
    return [*_whole_forms(secret), *_piece_forms(secret)]


@lru_cache(maxsize=64)
def _whole_forms(secret: str) -> list[str]:
    found: set[str] = set()
    for value in {secret, unicodedata.normalize("NFC", secret), unicodedata.normalize("NFD", secret)}:
        once = _encodings(value)
        found |= once | {again for form in once for again in _encodings(form)}
    return sorted(found, key=len, reverse=True)


@lru_cache(maxsize=64)
def _piece_forms(secret: str) -> list[str]:
    found: set[str] = set()
    for value in {secret, unicodedata.normalize("NFC", secret), unicodedata.normalize("NFD", secret)}:
        pieces = [p for p in re.split(r"\s+", value) if len(p) >= MIN_SECRET_PIECE]
        found |= {form for piece in pieces for form in _encodings(piece)}
    return sorted(found, key=len, reverse=True)


# What a message may have done to a credential before it reached us: HTML escaped it (`&quot;`,
# `&#196;`, `&Auml;`), or changed its Unicode normal form (a server answering in NFD).
_VIEWS: tuple[Callable[[str], str], ...] = (
    html.unescape,
    lambda text: unicodedata.normalize("NFC", text),
    lambda text: unicodedata.normalize("NFC", html.unescape(text)),
    lambda text: unicodedata.normalize("NFD", html.unescape(text)),
)


def scrub(text: str) -> str:
    """`text` with every credential value, and every second-factor code made here, replaced by "***":
    in every encoding `_forms` lists; where only a decoded view of `text` (HTML entities resolved,
    Unicode normalised) shows one, that view, scrubbed, replaces `text`; and a text that ends in the
    start of one (a message cut short by someone else) loses that end too."""
    found = secrets()
    if found:
        for forms in (_whole_forms, _piece_forms):   # a whole value first, in any view: its pieces leave its gaps
            for view in (str, *_VIEWS):
                seen = view(text)
                blanked = _blank(seen, [form for secret in found for form in forms(secret)])
                if blanked != seen:
                    text = blanked
        text = _blank_cut_end(text, found)
    for code in list(_codes):
        text = re.sub(rf"(?<!\d){re.escape(code)}(?!\d)", "***", text)
    return text


def _blank(text: str, forms: list[str]) -> str:
    for form in forms:
        if form in text:
            text = text.replace(form, "***")
    return text


_CUT_MARKS = " \t\r\n.\u2026'\")]}"   # what a cut may leave after a credential's start: an ellipsis, quotes


def _blank_cut_end(text: str, found: list[str]) -> str:
    """`text` without a trailing start (MIN_SECRET_PIECE characters or more) of a credential's form."""
    body = text.rstrip(_CUT_MARKS)
    for secret in found:
        for form in _forms(secret):
            start = body.find(form[:MIN_SECRET_PIECE], max(0, len(body) - len(form) + 1))
            while start >= 0:
                if form.startswith(body[start:]):
                    return f"{body[:start]}***{text[len(body):]}"
                start = body.find(form[:MIN_SECRET_PIECE], start + 1)
    return text


def scrub_log_records() -> None:
    """Scrub every log record this process makes from now on (its message, and the traceback it
    carries, formatted here): Prefect ships records to its database, so no credential may be in
    one. Idempotent."""
    global _plain_records
    if _plain_records is not None:
        return
    _plain_records = logging.getLogRecordFactory()
    make = _plain_records

    def scrubbed(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        if not secrets() and not _codes:
            return record
        try:
            message = record.getMessage()
        except Exception:   # a record whose arguments do not fit its message: left to logging's own report
            return record
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, ()
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = scrub("".join(traceback.format_exception(*record.exc_info)).rstrip("\n"))
        return record

    logging.setLogRecordFactory(scrubbed)


_plain_records: Callable[..., logging.LogRecord] | None = None


def login_host(baseurl: str) -> str:
    """The host a token is minted on: API v1 hosts share their v2 sibling's login."""
    base = baseurl.rstrip("/")
    base = V2_OF.get(base, base)
    parts = urlsplit(base)
    return f"{parts.scheme}://{parts.netloc}"


def current_login(baseurl: str, api_version: int) -> Login:
    """The identity for a client of `baseurl` (see the module docstring); mints a token at most once
    per run and host (`renew` mints again after a refusal)."""
    token = os.environ.get(TOKEN_ENV, "").strip()
    if token:
        return Login(checked_token(token.removeprefix("Bearer ").strip()), "token")
    username, password = password_login()
    if not username:
        return Login()
    key = (login_host(baseurl), username)
    with _lock:   # one login per run and host, whatever the number of workers
        if key not in _minted:
            _minted[key] = _mint(baseurl, api_version, username, password)
            _origins[key] = (baseurl, api_version)
        return Login(_minted[key], "password", username, key[0])


def checked_token(token: str) -> str:
    """`token` when an HTTP header can carry it (printable ASCII, no white space), else one
    `AuthenticationError` line that says what is wrong and where, never the token itself."""
    for at, char in enumerate(token, start=1):
        if not (char.isascii() and char.isprintable()) or char.isspace():
            what = ("a line break" if char in "\r\n" else "white space" if char.isspace()
                    else "a non-ASCII character" if not char.isascii() else "a control character")
            raise AuthenticationError(f"{TOKEN_ENV} holds {what} at character {at} of {len(token)}: a token is "
                                      "printable ASCII on one line; copy it again")
    return token


def password_login() -> tuple[str, str]:
    """(username, password) from the environment, ("", "") when neither is set; one of the two alone
    is an `AuthenticationError`."""
    username, password = os.environ.get(USERNAME_ENV, "").strip(), os.environ.get(PASSWORD_ENV, "")
    if username and password:
        return username, password
    if username or password:
        missing = PASSWORD_ENV if username else USERNAME_ENV
        raise AuthenticationError(f"OpenReview login needs both {USERNAME_ENV} and {PASSWORD_ENV}: {missing} "
                                  f"is not set (or set {TOKEN_ENV} instead)")
    return "", ""


def token_now(login: Login) -> str | None:
    """The token a client of `login` sends now: a minted login's latest token (renewed or not)."""
    if login.source != "password" or login.host is None or login.username is None:
        return login.token
    with _lock:
        return _minted.get((login.host, login.username), login.token)


def renew(login: Login, refused: str) -> str | None:
    """A new token for `login` after the service refused `refused` (401), or None when none can be
    had (a token from the environment, a guest). Workers refused at once share one new login."""
    if login.source != "password" or login.host is None or login.username is None:
        return None
    key = (login.host, login.username)
    with _lock:
        current = _minted.get(key)
        if current is not None and current != refused:
            return current                   # another worker has logged in again already
        username, password = password_login()
        if username != login.username:
            return None
        baseurl, api_version = _origins.get(key, (login.host, 2))
        _spent.add(refused)
        _minted[key] = _mint(baseurl, api_version, username, password)
        _origins[key] = (baseurl, api_version)
        return _minted[key]


def forget_minted() -> None:
    """Drop the tokens minted so far (a new run, or a test, logs in again)."""
    with _lock:
        _minted.clear()
        _origins.clear()


def login_client(baseurl: str, api_version: int, username: str, password: str) -> Any:
    """A client of the real library logged in as `username` (a second factor from `totp_code`), never
    prompting; a refusal is one line without secrets (`AuthenticationError`)."""
    import openreview
    from openreview.api import OpenReviewClient

    base = baseurl.rstrip("/")
    try:
        with never_prompting():
            if api_version == 2 or base in V2_OF:
                return OpenReviewClient(baseurl=V2_OF.get(base, base), username=username, password=password,
                                        tokenExpiresIn=TOKEN_LIFETIME, mfa_code_provider=totp_code)
            return openreview.Client(baseurl=base, username=username, password=password,
                                     tokenExpiresIn=TOKEN_LIFETIME, mfa_code_provider=totp_code)
    except openreview.MfaRequiredException as error:
        raise AuthenticationError(second_factor_needed(username, list(error.mfa_methods or []))) from None
    except openreview.OpenReviewException as error:
        also = f", {TOTP_ENV}" if os.environ.get(TOTP_ENV, "").strip() else ""
        raise AuthenticationError(scrub(f"OpenReview login as {username} failed ({describe(error)}): check "
                                        f"{USERNAME_ENV} and {PASSWORD_ENV}{also}, or set {TOKEN_ENV}")) from None
    except OSError as error:   # requests' connection errors are OSErrors
        raise AuthenticationError(scrub(f"OpenReview login at {base} failed: {type(error).__name__}")) from None


def _mint(baseurl: str, api_version: int, username: str, password: str) -> str:
    """Log in through the real client and return its token."""
    client = login_client(baseurl, api_version, username, password)
    if not client.token:
        raise AuthenticationError(f"OpenReview login as {username} returned no token")
    return str(client.token)


def totp_code(method: str) -> str:
    """openreview-py's `mfa_code_provider`: the current code of OPENREVIEW_TOTP_SECRET. It never
    answers empty (the library would then prompt): without a secret it stops the login."""
    secret = re.sub(r"\s+", "", os.environ.get(TOTP_ENV, "")).upper()
    if method != "totp" or not secret:
        raise AuthenticationError(second_factor_needed(os.environ.get(USERNAME_ENV, "").strip(), [method]))
    import pyotp

    try:
        code = pyotp.TOTP(secret).now()
    except (ValueError, TypeError) as error:   # binascii.Error is a ValueError
        raise AuthenticationError(scrub(f"{TOTP_ENV} is not a usable TOTP secret ({error}): give the base32 key "
                                        "an authenticator app is given (the secret= of its otpauth:// link)")) from None
    with _lock:
        _codes.add(code)
    return code


def second_factor_needed(username: str, methods: list[str]) -> str:
    """The one line for an account that asks for a second factor the environment cannot give."""
    offered = ", ".join(methods) or "unknown"
    if "totp" in methods:
        return (f"OpenReview asks the account {username} for a second factor ({offered}) and no command here "
                f"prompts for one: set {TOTP_ENV} to the account's authenticator (TOTP) secret, or set "
                f"{TOKEN_ENV} to a token of a logged-in session")
    return (f"OpenReview asks the account {username} for a second factor ({offered}) that a batch run cannot "
            f"give: add an authenticator app (TOTP) to the account and set {TOTP_ENV}, or set {TOKEN_ENV} "
            f"to a token of a logged-in session")


_prompting = threading.Lock()


@contextmanager
def never_prompting() -> Iterator[None]:
    """openreview-py's interactivity check answers False inside the block, so a login asks no one
    (no `input()`, no browser) and raises `MfaRequiredException` instead."""
    from openreview import mfa

    with _prompting:
        saved: Callable[[], bool] = mfa._is_interactive
        mfa._is_interactive = lambda: False
        try:
            yield
        finally:
            mfa._is_interactive = saved


def describe(error: Any) -> str:
    """'Name: message' of an OpenReview error (its JSON body or the exception's first argument)."""
    body = error.args[0] if getattr(error, "args", None) else error
    if isinstance(body, dict):   # scrubbed before the cut: a cut can leave the start of a credential
        name, message = body.get("name") or "Error", body.get("message") or ""
        return f"{scrub(str(name))[:100]}: {scrub(str(message))[:200]}" if message else scrub(str(name))[:100]
    return scrub(str(body))[:200]


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
            return (f"OpenReview refused the token just minted for {login.username} ({what}): check the "
                    f"account, or set {TOKEN_ENV}; a rerun resumes")
        return f"OpenReview asks for a login ({what}): {WHAT_TO_SET}"
    return None
