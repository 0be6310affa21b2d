"""A local OpenReview-compatible HTTP server for tests, benchmarks and the offline demo.

Serves `SyntheticVenue`s in API v1 shape under `<url>/v1` and API v2 shape under `<url>/v2`,
answering what `openreview.Client` / `openreview.api.OpenReviewClient` call: `GET /notes`
(invitation, id, forum, content.<field>, details=directReplies|replies, sort, offset, after,
limit capped at the server's page limit, count), `GET /groups`, `GET /pdf` and `/attachment`,
`POST /login` and `POST /mfa/verify` (tokens: see below), `GET /profiles` (with a token and no
query: the caller's own profile), and revision histories: v2 `GET /notes/edits?note.id=` and
`/notes/edits/attachment?id=&name=pdf`, v1 `GET /references?referent=` and `/references/pdf?id=`
(endpoint names "edits", "edit_pdf", "references", "reference_pdf" for faults and counts), and
`GET /invitations?id=<venue>/-/Official_Review`: the review form (v1 `reply.content`, v2 a super
invitation's `edit.invitation.edit.note.content`; an ICLR-2026-like 0-10 form with `form="iclr2026"`). Notes are serialised once per (API, query shape) and pages are
byte joins, so 12,000 papers serve in seconds. Faults (429 with Retry-After, a reset time or an
HTML body, 5xx, slow answers, malformed pages) are injected per test with `inject`, an outage (no
request answered for some seconds) with `stop_answering`; `requests` counts calls per path, and with
`request_log` every answered request is also appended to a JSON-lines file as it goes out (a log
that outlives a process killed mid-run, so a rerun's requests can be counted against the first's).

A `Policy` makes the server answer as OpenReview does today (docs/openreview.md lists the
sources): guests refused with `403 ChallengeRequiredError` on everything but `/groups` and
`/login`; `POST /login` minting tokens that expire (`401 TokenExpiredError`): JWTs naming the
user and their `exp`, lasting `expiresIn` seconds (an hour when not given, at most
`token_lifetime`: a week on the real service, seconds in a test, or `token_uses` requests); accounts
with two-factor login (`second_factor`: username -> TOTP secret) answered `{"mfaPending": true,
"mfaPendingToken": ..., "mfaMethods": ["totp"]}` and finished by `POST /mfa/verify` with the
current code (checked with pyotp); limits per endpoint
answered with `429 RateLimitError` naming `details.resetTime`; a firewall answering an HTML 429 to
clients without the library's User-Agent; v2 edit histories hidden from outsiders (only an
accepted paper's camera-ready revisions, and a superseded PDF is a 404); venues that list only
their accepted papers; forms with integer scores. `Policy()` is the lenient server the older tests
use, `Policy.today()` the real service. `GET /groups?id=venues` lists the served venues.

    with serve_venues([venue], page_limit=5, policy=Policy.today()) as server:
        token = server.issue_token()
        client = openreview.api.OpenReviewClient(baseurl=server.v2_url, token=token)
"""

from __future__ import annotations

import html
import json
import re
import secrets
import threading
import time
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit

from tasks.testing.http import send
from tasks.testing.openreview_render import RenderedNote, render_venue, review_invitation, venue_group
from tasks.testing.synthetic import SyntheticVenue

FaultKind = Literal["429", "5xx", "slow", "malformed", "bad_shape", "echo", "no_profile"]
_SUBPATHS = {"mfa/verify": "mfa_verify", "notes/edits": "edits", "notes/edits/attachment": "edit_pdf", "references": "references",
             "references/pdf": "reference_pdf"}
_SORTABLE = ("number", "id", "cdate", "tcdate", "mdate", "tmdate")
OPEN_ENDPOINTS = ("groups", "login", "mfa_verify", "profiles")   # what the real API still answers guests
LIMIT_GROUPS = {"edits": "edits", "references": "edits", "pdf": "pdf", "attachment": "pdf",
                "edit_pdf": "pdf", "reference_pdf": "pdf"}   # endpoint -> its limit; others: "notes"
SCORE_FIELDS = ("rating", "confidence", "soundness", "presentation", "contribution")
LIBRARY_AGENT = "openreview-py/"
FIREWALL_PAGE = (b"<!DOCTYPE html><html><head><title>429 Too Many Requests</title></head><body>"
                 b"<h1>Too Many Requests</h1><p>Please slow down.</p></body></html>")


@dataclass
class Policy:
    """How the server treats its callers (module docstring); the defaults are the lenient server."""

    guests: bool = True                      # False: 403 ChallengeRequiredError without a token
    accounts: dict[str, str] = field(default_factory=dict)   # username -> password; empty: any login works
    token_lifetime: float = 7 * 24 * 3600    # seconds, the most a token lasts; the real cap is a week
    token_uses: int | None = None            # a token minted by a login answers this many requests, then expires
    second_factor: dict[str, str] = field(default_factory=dict)   # username -> TOTP secret (two-factor login)
    firewall: bool = False                   # HTML 429 to clients without the library's User-Agent
    v2_history: Literal["public", "hidden"] = "public"
    accepted_only: frozenset[str] = frozenset()    # venues listing only their accepted papers
    integer_scores: frozenset[str] = frozenset()   # venues (v2) whose forms give integer scores
    limits: dict[str, tuple[int, float]] = field(default_factory=dict)   # "notes" | "edits" | "pdf" -> (requests, window s)

    @classmethod
    def today(cls, **changes: Any) -> Policy:
        """The real service as documented in 2026 (limits scaled down by the caller for tests)."""
        base = {"guests": False, "firewall": True, "v2_history": "hidden",
                "limits": {"notes": (500, 1800.0), "edits": (18, 60.0), "pdf": (36, 3600.0)}}
        return cls(**{**base, **changes})

    def scaled(self, time_scale: float) -> Policy:
        """This policy with every time it names multiplied by `time_scale` (limit windows, token
        lifetime): the real service's limits in a rehearsal that runs `1 / time_scale` times faster."""
        from dataclasses import replace

        return replace(self, token_lifetime=self.token_lifetime * time_scale,
                       limits={k: (n, window * time_scale) for k, (n, window) in self.limits.items()})


@dataclass
class _Token:
    expires_at: float                 # epoch seconds
    uses_left: int | None = None      # requests it still answers (None: until expiry)
    user: str = "~Local_User1"


@dataclass
class _Pending:
    """A login waiting for its second factor."""

    user: str
    expires_in: float | None
    tries_left: int = 3


@dataclass
class Fault:
    """A misbehaviour served to the next `times` matching requests (after skipping `skip`)."""

    kind: FaultKind
    times: int = 1
    endpoint: str = "notes"                  # notes | groups | pdf | login | "*"
    api: int | None = None                   # 1, 2 or both
    when: Callable[[dict[str, str]], bool] | None = None   # extra test on the query parameters
    skip: int = 0
    status: int = 503                        # for "5xx"
    retry_after: int | None = 1              # seconds, for "429" (None: no header)
    reset_in: float | None = None            # "429": a RateLimitError body whose resetTime is this far ahead
    html: bool = False                       # "429": the firewall's HTML page instead of JSON
    delay: float = 5.0                       # seconds, for "slow"
    echo_as: Literal["json", "html", "nfd", "long"] = "json"   # "echo": how the request body comes back

    def matches(self, api: int, endpoint: str, params: dict[str, str]) -> bool:
        return (self.times > 0 and self.endpoint in ("*", endpoint) and self.api in (None, api)
                and (self.when is None or self.when(params)))


@dataclass(frozen=True)
class RequestRecord:
    at: float
    api: int
    endpoint: str
    params: dict[str, str]
    status: int


@dataclass
class _Index:
    """One API shape of one venue: rendered notes plus caches of serialised note lists."""

    venue: SyntheticVenue
    notes: list[RenderedNote]
    group: dict[str, Any]
    by_id: dict[str, dict[str, Any]] = field(default_factory=dict)
    history: dict[str, list[dict[str, Any]]] = field(default_factory=dict)   # note id -> edits / references
    files: dict[str, Callable[[], bytes]] = field(default_factory=dict)       # edit / reference id -> loads its PDF
    cache: dict[tuple, list[tuple[dict[str, Any], bytes]]] = field(default_factory=dict)


class OpenReviewServer:
    """Threaded HTTP server on 127.0.0.1; use as a context manager or call start() / stop()."""

    def __init__(self, venues: Iterable[SyntheticVenue], page_limit: int = 1000, port: int = 0,
                 policy: Policy | None = None, request_log: Path | None = None) -> None:
        self.page_limit = page_limit
        self.policy = policy or Policy()
        self.tokens: dict[str, _Token] = {}
        self.logins = 0                                  # successful logins (POST /login, or /mfa/verify)
        self.pending: dict[str, _Pending] = {}           # mfaPendingToken -> the login it finishes
        self._secret = secrets.token_bytes(32)           # signs the JWTs
        self._windows: dict[tuple[str, str], list[float]] = {}   # (limit, caller) -> [window start, count]
        self.faults: list[Fault] = []
        self.requests: Counter[str] = Counter()
        self.log: list[RequestRecord] = []             # answered requests
        self.arrivals: list[tuple[int, str, dict[str, str]]] = []   # every request, on arrival
        self.send_content_length = True      # False: stream PDFs chunked, without a declared size
        self.down_until = 0.0                # epoch seconds: requests arriving before then get no answer
        self.request_log = request_log
        self._lock = threading.Lock()
        self._indexes: dict[tuple[int, str], _Index] = {}
        self._venues = list(venues)
        self._pdfs = {p.paper_id: p for v in self._venues for p in v.papers}
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), _make_handler(self))
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def v1_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def v2_url(self) -> str:
        return f"{self.url}/v2"

    def start(self) -> OpenReviewServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="openreview-server",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> OpenReviewServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def inject(self, *faults: Fault) -> None:
        with self._lock:
            self.faults.extend(faults)

    def fetched_twice(self) -> list[tuple[int, str, tuple[tuple[str, str], ...]]]:
        """The requests answered 200 more than once (the same API, endpoint and query), logins and profiles
        aside: what a resumed or renewed download must never ask again."""
        seen, again = set(), []
        for record in list(self.log):
            if record.status != 200 or record.endpoint in ("login", "profiles"):
                continue
            key = (record.api, record.endpoint, tuple(sorted(record.params.items())))
            (again.append if key in seen else seen.add)(key)
        return again

    def clear(self) -> None:
        """Drop pending faults and reset the request counters."""
        with self._lock:
            self.faults.clear()
            self.requests.clear()
            self.log.clear()
            self.arrivals.clear()

    def stop_answering(self, seconds: float) -> None:
        """An outage: for `seconds` from now every request is held unanswered until the outage ends,
        then its connection is closed with no answer (the caller sees a timeout or a dropped connection)."""
        self.down_until = time.time() + seconds

    def count(self, api: int, endpoint: str = "notes") -> int:
        return self.requests[f"/v{api}/{endpoint}"]

    def warm(self, api_version: int, details: str | None = "directReplies") -> None:
        """Serialise the submissions ahead of the first request (benchmarks call this)."""
        for venue in self._venues:
            index = self._index(api_version, venue.venue_id)
            self._submissions(index, api_version, details, {})

    # -- data -------------------------------------------------------------------------------
    def _index(self, api: int, venue_id: str) -> _Index:
        key = (api, venue_id)
        with self._lock:
            if key not in self._indexes:
                venue = next(v for v in self._venues if v.venue_id == venue_id)
                index = _Index(venue, render_venue(venue, api), venue_group(venue, api))
                for rendered in index.notes:
                    index.by_id[rendered.note["id"]] = rendered.note
                    index.history.update(rendered.history)
                    index.files.update(rendered.files)
                    for reply in rendered.replies:
                        index.by_id.setdefault(reply["id"], reply)
                if api == 2 and venue_id in self.policy.integer_scores:
                    _integer_scores(index)
                self._indexes[key] = index
            return self._indexes[key]

    def _venue_of(self, invitation: str | None, ident: str | None, forum: str | None) -> str | None:
        for venue in self._venues:
            if invitation and invitation.startswith(venue.venue_id + "/"):
                return venue.venue_id
            for api in (1, 2):
                index = self._indexes.get((api, venue.venue_id))
                if index and (ident in index.by_id or forum in index.by_id):
                    return venue.venue_id
        if ident or forum:   # ids of notes not yet indexed: index every venue and look again
            for venue in self._venues:
                for api in (1, 2):
                    index = self._index(api, venue.venue_id)
                    if ident in index.by_id or forum in index.by_id:
                        return venue.venue_id
        return None

    def _submissions(self, index: _Index, api: int, details: str | None, filters: dict[str, str]
                     ) -> list[tuple[dict[str, Any], bytes]]:
        """Serialised submissions with the requested details, cached per query shape."""
        key = ("sub", details, tuple(sorted(filters.items())))
        cached = index.cache.get(key)
        if cached is not None:
            return cached
        wanted = {d for d in (details or "").split(",") if d}
        out = []
        for rendered in index.notes:
            note = rendered.note
            if any(_content_value(note, k) != v for k, v in filters.items()):
                continue
            if wanted & {"directReplies", "replies", "replyCount", "directReplyCount"}:
                direct = [r for r, d in zip(rendered.replies, rendered.direct, strict=True) if d]
                extra: dict[str, Any] = {}
                if "directReplies" in wanted:
                    extra["directReplies"] = direct
                if "replies" in wanted:
                    extra["replies"] = rendered.replies
                if "replyCount" in wanted:
                    extra["replyCount"] = len(rendered.replies)
                if "directReplyCount" in wanted:
                    extra["directReplyCount"] = len(direct)
                note = {**note, "details": extra}
            out.append((rendered.note, _dumps(note)))
        with self._lock:
            index.cache[key] = out
        return out

    def notes_page(self, api: int, params: dict[str, str]) -> bytes:
        """The JSON body answering GET /notes."""
        invitation, ident, forum = params.get("invitation"), params.get("id"), params.get("forum")
        venue_id = self._venue_of(invitation, ident, forum)
        items: list[tuple[dict[str, Any], bytes]] = []
        if venue_id is not None:
            index = self._index(api, venue_id)
            items = self._select(index, api, params)
        items = _sorted(items, params.get("sort"))
        if params.get("after"):
            items = [it for it in items if it[0]["id"] > params["after"]]
        offset = int(params.get("offset") or 0)
        limit = min(int(params.get("limit") or self.page_limit), self.page_limit)
        page = items[offset:offset + limit]
        return b'{"notes":[' + b",".join(body for _, body in page) + b'],"count":%d}' % len(items)

    def _select(self, index: _Index, api: int, params: dict[str, str]) -> list[tuple[dict[str, Any], bytes]]:
        vid = index.venue.venue_id
        invitation, ident, forum = params.get("invitation"), params.get("id"), params.get("forum")
        details = params.get("details")
        filters = {k[8:]: v for k, v in params.items() if k.startswith("content.")}
        if ident:
            note = index.by_id.get(ident)
            return [(note, _dumps(note))] if note else []
        submission_invitations = {1: {f"{vid}/-/Blind_Submission", f"{vid}/-/Submission",
                                      f"{vid}/-/Withdrawn_Submission", f"{vid}/-/Desk_Rejected_Submission"},
                                  2: {f"{vid}/-/Submission"}}[api]
        if invitation in submission_invitations or (forum and not invitation):
            items = self._submissions(index, api, details, filters)
            if vid in self.policy.accepted_only:   # the others are not readable by outsiders
                items = [it for it in items if _content_value(it[0], "venueid") == vid]
            if api == 1 and invitation and not invitation.endswith("/-/Submission"):
                items = [it for it in items if it[0]["invitation"] == invitation]
            if forum:
                items = [it for it in items if it[0]["id"] == forum]
                replies = [r for n in index.notes if n.note["id"] == forum for r in n.replies]
                items = items + [(r, _dumps(r)) for r in replies]
            return items
        if invitation:   # reply invitations; v1 style ".*" wildcards allowed
            pattern = re.compile(re.escape(invitation).replace(r"\.\*", ".*"))
            out = []
            for rendered in index.notes:
                for reply in rendered.replies:
                    invs = reply.get("invitations") or [reply.get("invitation")]
                    if any(pattern.fullmatch(i or "") for i in invs) and (not forum or reply["forum"] == forum):
                        out.append((reply, _dumps(reply)))
            return out
        return []

    def pdf(self, ident: str) -> tuple[bytes, int] | None:
        paper = self._pdfs.get(ident)
        current = paper.current_pdf if paper else None
        return (current, paper.pdf_padding) if paper and current is not None else None

    def history(self, api: int, note_id: str) -> list[dict[str, Any]]:
        """The v2 edits / v1 references of a note, oldest first (empty for an unknown note).

        With hidden v2 histories an outsider reads only an accepted paper's revisions after the
        decision, as `Camera_Ready_Revision` edits, and nothing of rejected papers or reviews."""
        venue_id = self._venue_of(None, note_id, None)
        if not venue_id:
            return []
        index = self._index(api, venue_id)
        found = index.history.get(note_id, [])
        if api == 1 or self.policy.v2_history == "public":
            return found
        paper = self._pdfs.get(note_id)
        if paper is None or not (paper.decision or "").startswith("Accept"):
            return []
        return [{**edit, "invitation": edit["invitation"].replace("/-/Revision", "/-/Camera_Ready_Revision")}
                for edit in found if edit["invitation"].endswith("/-/Revision")]

    def revision_pdf(self, api: int, ident: str) -> bytes | None:
        """The PDF of one edit (v2) or reference (v1); with hidden v2 histories only the current PDF
        of a readable edit (a superseded one is not served)."""
        for venue in self._venues:
            load = self._index(api, venue.venue_id).files.get(ident)
            if load is None:
                continue
            found = load()
            if api == 2 and self.policy.v2_history == "hidden":
                paper = next((p for p in venue.papers if ident.startswith(p.paper_id)), None)
                readable = paper is not None and any(e["id"] == ident for e in self.history(2, paper.paper_id))
                return found if readable and found == paper.current_pdf else None
            return found
        return None

    def venues_group(self) -> dict[str, Any]:
        """The `venues` group: every venue id the server serves, as the real group lists all venues."""
        return {"id": "venues", "readers": ["everyone"], "writers": ["~Super_User1"], "signatures": ["~Super_User1"],
                "signatories": ["venues"], "members": sorted(v.venue_id for v in self._venues)}

    # -- callers -------------------------------------------------------------------------------
    def issue_token(self, lifetime: float | None = None, user: str | None = None, uses: int | None = None) -> str:
        """A new token, as `POST /login` returns: a JWT naming `user` and its expiry (`lifetime`
        seconds, default and cap the policy's `token_lifetime`)."""
        import jwt

        now = time.time()
        life = min(lifetime or self.policy.token_lifetime, self.policy.token_lifetime)
        user = user or "~Local_User1"
        payload = {"user": {"id": user, "profile": {"id": profile_id(user)}}, "iat": int(now),
                   "exp": int(now + life), "jti": secrets.token_urlsafe(8)}
        token = jwt.encode(payload, self._secret, algorithm="HS256")
        with self._lock:
            self.tokens[token] = _Token(now + life, uses, user)
        return token

    def expire_token(self, token: str, after: int = 0) -> None:
        """Let `token` answer `after` more requests, then expire."""
        with self._lock:
            self.tokens[token].uses_left = after

    def check_caller(self, endpoint: str, authorization: str | None) -> tuple[int, dict[str, Any]] | None:
        """(status, error body) refusing the caller, or None (a use of its token is counted)."""
        if authorization:
            token = authorization.removeprefix("Bearer ").strip()
            with self._lock:
                record = self.tokens.get(token)
                if record is None or record.expires_at <= time.time() or record.uses_left == 0:
                    return 401, {"name": "TokenExpiredError", "message": "Token has expired. Please log in again.",
                                 "status": 401, "details": {"reqId": secrets.token_hex(6)}}
                if record.uses_left is not None:
                    record.uses_left -= 1
            return None
        if not self.policy.guests and endpoint not in OPEN_ENDPOINTS:
            return 403, {"name": "ChallengeRequiredError", "message": "Challenge verification required",
                         "status": 403}
        return None

    def over_limit(self, endpoint: str, caller: str) -> dict[str, Any] | None:
        """A RateLimitError body when this request exceeds its endpoint's limit, else None."""
        group = LIMIT_GROUPS.get(endpoint, "notes")
        if group not in self.policy.limits or endpoint in ("login", "mfa_verify"):
            return None
        limit, window = self.policy.limits[group]
        now = time.time()
        with self._lock:
            started, used = self._windows.get((group, caller), (now, 0))
            if now >= started + window:
                started, used = now, 0
            used += 1
            self._windows[(group, caller)] = [started, used]
        if used <= limit:
            return None
        reset = started + window
        return rate_limit_body(limit, used, reset)

    def login(self, body: bytes) -> tuple[int, dict[str, Any]]:
        """`POST /login`: a token, or for a two-factor account the pending login `/mfa/verify` finishes."""
        sent = _json_body(body)
        user, password = str(sent.get("id") or ""), str(sent.get("password") or "")
        accounts = self.policy.accounts
        if accounts and accounts.get(user) != password:
            return 400, {"name": "Error", "message": "Invalid username or password", "status": 400}
        expires = sent.get("expiresIn")
        expires_in = float(expires) if isinstance(expires, int | float) and expires > 0 else None
        if user in self.policy.second_factor:
            pending = secrets.token_urlsafe(24)
            with self._lock:
                self.pending[pending] = _Pending(user, expires_in)
            return 200, {"mfaPending": True, "mfaPendingToken": pending, "mfaMethods": ["totp"],
                         "preferredMethod": "totp"}
        return 200, self._logged_in(user or "~Local_User1", expires_in)

    def mfa_verify(self, body: bytes) -> tuple[int, dict[str, Any]]:
        """`POST /mfa/verify`: the pending login's token when `code` is the account's current TOTP code."""
        import pyotp

        sent = _json_body(body)
        with self._lock:
            pending = self.pending.get(str(sent.get("mfaPendingToken") or ""))
            if pending is not None:
                pending.tries_left -= 1
                if pending.tries_left <= 0:
                    self.pending.pop(str(sent.get("mfaPendingToken")), None)
        if pending is None:
            return 401, {"name": "MfaError", "message": "The verification session has expired. Please log in "
                         "again.", "status": 401}
        secret = self.policy.second_factor[pending.user]
        if sent.get("method") != "totp" or not pyotp.TOTP(secret).verify(str(sent.get("code") or ""), valid_window=1):
            return 400, {"name": "MfaError", "message": "Invalid verification code", "status": 400}
        with self._lock:
            self.pending.pop(str(sent.get("mfaPendingToken")), None)
        return 200, self._logged_in(pending.user, pending.expires_in)

    def _logged_in(self, user: str, expires_in: float | None) -> dict[str, Any]:
        """The answer of a finished login: a token lasting `expires_in` (an hour by default, capped)."""
        token = self.issue_token(expires_in or 3600.0, user, self.policy.token_uses)
        with self._lock:
            self.logins += 1
        return {"token": token, "user": {"id": user, "profile": {"id": profile_id(user)}}}

    def whoami(self, authorization: str | None) -> list[dict[str, Any]]:
        """`GET /profiles` without a query: the caller's own profile (none for a guest)."""
        record = self.tokens.get((authorization or "").removeprefix("Bearer ").strip())
        if record is None:
            return []
        return [{"id": profile_id(record.user), "content": {"emails": [record.user] if "@" in record.user else [],
                                                            "preferredEmail": record.user}}]

    def invitation(self, api: int, ident: str) -> dict[str, Any] | None:
        """A venue's official-review invitation with its form (tasks/testing/openreview_render.py)."""
        for venue in self._venues:
            if ident == f"{venue.venue_id}/-/Official_Review":
                return review_invitation(venue, api, api == 2 and venue.venue_id in self.policy.integer_scores)
        return None

    def group(self, api: int, ident: str) -> dict[str, Any] | None:
        if ident == "venues":
            return self.venues_group()
        if not any(v.venue_id == ident for v in self._venues):
            return None
        return self._index(api, ident).group

    def take_fault(self, api: int, endpoint: str, params: dict[str, str]) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.matches(api, endpoint, params):
                    if fault.skip > 0:
                        fault.skip -= 1
                        return None
                    fault.times -= 1
                    return fault
        return None

    def record(self, api: int, endpoint: str, params: dict[str, str], status: int, arrived: float) -> None:
        """Count an answered request (`at` is its arrival time; a slow answer is logged when it goes out)."""
        with self._lock:
            self.requests[f"/v{api}/{endpoint}"] += 1
            self.log.append(RequestRecord(arrived, api, endpoint, params, status))
            if self.request_log is not None:
                line = json.dumps({"at": round(time.time(), 3), "api": api, "endpoint": endpoint, "params": params,
                                   "status": status})
                with self.request_log.open("a", encoding="utf-8") as out:
                    out.write(line + "\n")


def profile_id(user: str) -> str:
    """The profile id of a local account: "~" and the name before the "@", as OpenReview spells ids."""
    if user.startswith("~"):
        return user
    name = re.sub(r"[^A-Za-z]+", "_", user.split("@")[0]).strip("_").title() or "Local_User"
    return f"~{name}1"


def _json_body(body: bytes) -> dict[str, Any]:
    try:
        sent = json.loads(body or b"{}")
    except ValueError:
        return {}
    return sent if isinstance(sent, dict) else {}


def rate_limit_body(limit: int, used: int, reset: float) -> dict[str, Any]:
    """OpenReview's RateLimitError: how many requests, the limit, and when it resets."""
    wait = max(0, int(reset - time.time()))
    stamp = datetime.fromtimestamp(reset, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return {"name": "RateLimitError", "status": 429,
            "message": f"Too many requests: You have made {used} requests, surpassing the limit of {limit} "
                       f"requests. Please try again in {wait // 60} minutes and {wait % 60} seconds",
            "details": {"limit": limit, "remaining": 0, "resetTime": stamp, "used": used, "current": used}}


def _integer_scores(index: _Index) -> None:
    """Forms with integer scores: "6: marginally above ..." becomes 6 in reviews and their edits."""
    def convert(content: dict[str, Any] | None) -> None:
        for key in SCORE_FIELDS:
            item = (content or {}).get(key)
            raw = item.get("value") if isinstance(item, dict) else None
            match = re.match(r"\s*(\d+)\b", raw) if isinstance(raw, str) else None
            if match:
                item["value"] = int(match.group(1))

    for rendered in index.notes:
        for reply in rendered.replies:
            convert(reply.get("content"))
    for edits in index.history.values():
        for edit in edits:
            convert((edit.get("note") or {}).get("content"))


def _dumps(note: dict[str, Any]) -> bytes:
    # Lone surrogates carry bytes that are not UTF-8 (the synthetic "non_utf8" case); they go out raw.
    return json.dumps(note, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogateescape")


def _content_value(note: dict[str, Any], key: str) -> str:
    value = (note.get("content") or {}).get(key)
    return str(value.get("value") if isinstance(value, dict) else value)


def _sorted(items: list[tuple[dict[str, Any], bytes]], sort: str | None) -> list[tuple[dict[str, Any], bytes]]:
    if not sort:
        return items
    name, _, direction = sort.partition(":")
    if name not in _SORTABLE:
        return items
    return sorted(items, key=lambda it: (it[0].get(name) is None, it[0].get(name) or 0),
                  reverse=direction.lower() == "desc")


def _error(status: int, message: str) -> bytes:
    names = {404: "NotFoundError", 429: "RateLimitError", 400: "BadRequestError"}
    return json.dumps({"name": names.get(status, "Error"), "message": message, "status": status}).encode()


def _make_handler(server: OpenReviewServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:   # keep test output quiet
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self._body = self.rfile.read(length) if length else b""
            self._dispatch()

        def do_GET(self) -> None:
            self._body = b""
            self._dispatch()

        def _dispatch(self) -> None:
            parts = urlsplit(self.path)
            match = re.fullmatch(r"/v([12])/([A-Za-z]+)(?:/.*)?", parts.path)
            params = dict(parse_qsl(parts.query, keep_blank_values=True))
            if not match:
                self._request = (0, "unknown", params, time.monotonic())
                self._send(404, _error(404, f"no such path {parts.path}"))
                return
            api, endpoint = int(match.group(1)), match.group(2)
            endpoint = _SUBPATHS.get(parts.path.split("/", 2)[-1], endpoint)
            arrived = time.monotonic()
            server.arrivals.append((api, endpoint, params))
            self._request = (api, endpoint, params, arrived)
            if time.time() < server.down_until:   # an outage: hold the request, then drop it unanswered
                time.sleep(max(0.0, server.down_until - time.time()))
                self.close_connection = True
                return
            try:
                if self._refused(endpoint):
                    return
                fault = server.take_fault(api, endpoint, params)
                if fault and fault.kind == "slow":
                    time.sleep(fault.delay)
                self._answer(api, endpoint, params, fault)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def _refused(self, endpoint: str) -> bool:
            """Answer the firewall's, the login's or a limit's refusal; True when one was sent."""
            policy = server.policy
            if policy.firewall and not (self.headers.get("User-Agent") or "").startswith(LIBRARY_AGENT):
                self._send(429, FIREWALL_PAGE, content_type="text/html; charset=utf-8")
                return True
            authorization = self.headers.get("Authorization")
            refused = server.check_caller(endpoint, authorization)
            if refused is not None:
                self._send(refused[0], json.dumps(refused[1]).encode())
                return True
            limited = server.over_limit(endpoint, authorization or self.client_address[0])
            if limited is not None:
                self._send(429, json.dumps(limited).encode())
                return True
            return False

        def _record(self, status: int) -> None:
            """Log the request before its body goes out, so a client never sees an answer not yet counted."""
            api, endpoint, params, arrived = self._request
            server.record(api, endpoint, params, status, arrived)

        def _echo(self, echo_as: str) -> int:
            """The request body quoted in a 400: in a JSON error (as sent, in NFD, or after 190
            characters of text, so a 200-character cut lands inside the password), or an HTML page that
            writes it with entities (`&quot;`, `&#196;`)."""
            sent = self._body.decode("utf-8", "replace")
            if echo_as == "html":
                quoted = html.escape(sent).encode("ascii", "xmlcharrefreplace").decode("ascii")
                password = html.escape(str(_json_body(self._body).get("password") or ""))
                page = (f"<!DOCTYPE html><html><body><h1>400 Bad Request</h1><p>Cannot parse {quoted}</p>"
                        f"<p>password: {password.encode('ascii', 'xmlcharrefreplace').decode('ascii')}</p>"
                        "</body></html>")
                return self._send(400, page.encode(), content_type="text/html; charset=utf-8")
            if echo_as == "nfd":
                sent = unicodedata.normalize("NFD", json.dumps(_json_body(self._body), ensure_ascii=False))
            elif echo_as == "long":   # the password starts at character 193 of the message
                sent = f"{'x' * 170} password={_json_body(self._body).get('password')}"
            return self._send(400, _error(400, f"Cannot parse {sent}"))

        def _answer(self, api: int, endpoint: str, params: dict[str, str], fault: Fault | None) -> int:
            if fault and fault.kind == "429":
                headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
                if fault.html:
                    return self._send(429, FIREWALL_PAGE, headers, content_type="text/html; charset=utf-8")
                if fault.reset_in is not None:
                    body = rate_limit_body(1, 2, time.time() + fault.reset_in)
                    return self._send(429, json.dumps(body).encode(), headers)
                return self._send(429, _error(429, "Too many requests, slow down"), headers)
            if fault and fault.kind == "5xx":
                return self._send(fault.status, _error(fault.status, "The server had a hiccup"))
            if fault and fault.kind == "echo":   # a careless server quoting the request body in its error
                return self._echo(fault.echo_as)
            if fault and fault.kind == "no_profile":   # a 200 that is not an answer of this API
                return self._send(200, b'{"status": "ok"}')
            if endpoint in ("edits", "references") and self.command == "GET":
                note_id = params.get("note.id" if endpoint == "edits" else "referent", "")
                found = server.history(api, note_id)
                if (endpoint == "edits") != (api == 2):
                    found = []
                key = "edits" if endpoint == "edits" else "references"
                return self._send(200, json.dumps({key: found, "count": len(found)}).encode())
            if endpoint in ("edit_pdf", "reference_pdf") and self.command == "GET":
                data = server.revision_pdf(api, params.get("id", ""))
                if data is None:
                    return self._send(404, _error(404, f"no pdf for revision {params.get('id')}"))
                return self._send(200, data, content_type="application/pdf")
            if endpoint == "notes" and self.command == "GET":
                body = server.notes_page(api, params)
                if fault and fault.kind == "malformed":
                    body = body[: max(len(body) // 2, 12)]
                elif fault and fault.kind == "bad_shape":
                    body = b'{"message":"unexpected","items":[]}'
                return self._send(200, body)
            if endpoint == "groups" and self.command == "GET":
                group = server.group(api, params.get("id", ""))
                if group is None:
                    return self._send(404, _error(404, f"group {params.get('id')} not found"))
                return self._send(200, json.dumps({"groups": [group]}).encode())
            if endpoint in ("pdf", "attachment") and self.command == "GET":
                return self._pdf(params.get("id", ""))
            if endpoint == "invitations" and self.command == "GET":
                found = server.invitation(api, params.get("id", ""))
                if found is None:
                    return self._send(404, json.dumps({"name": "NotFoundError", "status": 404, "message":
                                                       f"The Invitation {params.get('id')} was not found"}).encode())
                if isinstance(found, bytes):   # JSON text a test wrote itself (nested past json.dumps' depth)
                    return self._send(200, b'{"invitations": [' + found + b'], "count": 1}')
                return self._send(200, json.dumps({"invitations": [found], "count": 1}).encode())
            if endpoint == "login" and self.command == "POST":
                status, answer = server.login(self._body)
                return self._send(status, json.dumps(answer).encode())
            if endpoint == "mfa_verify" and self.command == "POST":
                status, answer = server.mfa_verify(self._body)
                return self._send(status, json.dumps(answer).encode())
            if endpoint == "profiles":
                own = server.whoami(self.headers.get("Authorization")) if not params else []
                return self._send(200, json.dumps({"profiles": own}).encode())
            return self._send(404, _error(404, f"{self.command} /{endpoint} is not served here"))

        def _pdf(self, ident: str) -> int:
            found = server.pdf(ident)
            if found is None:
                return self._send(404, _error(404, f"no pdf for {ident}"))
            data, padding = found
            if not padding:
                return self._send(200, data, content_type="application/pdf")
            self._record(200)
            self.send_response(200)
            self.send_header("Content-Type", "application/pdf")
            if server.send_content_length:
                self.send_header("Content-Length", str(len(data) + padding))
            else:
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunks = _padded(data, padding)
            try:
                for chunk in chunks:
                    if server.send_content_length:
                        self.wfile.write(chunk)
                    else:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                if not server.send_content_length:
                    self.wfile.write(b"0\r\n\r\n")
            except OSError:   # the client stopped reading (as it should for an oversized PDF)
                self.close_connection = True
            return 200

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None,
                  content_type: str = "application/json; charset=utf-8") -> int:
            self._record(status)
            send(self, status, body, content_type, headers)
            return status

    return Handler


def _padded(data: bytes, padding: int, chunk: int = 1 << 20) -> Iterator[bytes]:
    yield data
    block = b"\n" * chunk
    while padding > 0:
        yield block[: min(chunk, padding)]
        padding -= chunk


@contextmanager
def serve_venues(venues: Iterable[SyntheticVenue], page_limit: int = 1000, port: int = 0,
                 policy: Policy | None = None, request_log: Path | None = None) -> Iterator[OpenReviewServer]:
    """Serve `venues` on 127.0.0.1 for the duration of the `with` block, answering per `policy`."""
    server = OpenReviewServer(venues, page_limit=page_limit, port=port, policy=policy, request_log=request_log)
    with server:
        yield server
