"""Whom the environment logs in as, on which OpenReview hosts, and until when; never a credential.

`grebench login --check` prints one line per login host of a pipeline's ingest config, and the
yearly refresh runs the same check when it is scheduled and when it fires, so a missing or refused
login stops it before any work (`AuthenticationError`, one line).

Who: the caller's own profile (`GET /profiles` without a query, as openreview-py's `get_profile()`
asks), through a client with the run's login (a 401 is the usual one-line refusal). Until when: the
token's `exp` claim (OpenReview's tokens are JWTs; the claim is read, not verified, as openreview-py
reads its `user` claim). A token from OPENREVIEW_TOKEN lasts until then; a password login is minted
again whenever its token expires.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import openreview
import requests

from tasks.core.config import Config, ConfigError, IngestConfig
from tasks.core.errors import AuthenticationError
from tasks.stages.ingest.auth import (
    CREDENTIAL_ENVS,
    PASSWORD_ENV,
    TOKEN_ENV,
    TOTP_ENV,
    USERNAME_ENV,
    V2_OF,
    WHAT_TO_SET,
    current_login,
    login_host,
    token_now,
)

# Answers to "who am I" that mean the login held: a profile (200), an empty one or none to show (404),
# or one the account may not read (403 that is not a refusal of the login)
PROFILE_ANSWERS = (200, 403, 404)


@dataclass(frozen=True)
class Identity:
    """Who one host's login is (no credential in it)."""

    host: str
    source: str                     # "token" | "password"
    username: str | None
    profile: str | None
    expires: datetime | None        # None: the token does not say

    def line(self, now: datetime | None = None) -> str:
        """'<host>: logged in as <user> (<profile>) with <env vars>; the token expires <when> (...)'."""
        who = " ".join(p for p in (self.username or self.profile or "an unnamed account",
                                   f"({self.profile})" if self.profile and self.username else "") if p)
        how = (f"{USERNAME_ENV} and {PASSWORD_ENV}" + (f" and {TOTP_ENV}" if os.environ.get(TOTP_ENV, "").strip()
                                                       else "")) if self.source == "password" else TOKEN_ENV
        if self.expires is None:
            until = "the token does not say when it expires"
        else:
            left = self.expires - (now or datetime.now(UTC))
            until = f"the token expires {self.expires:%Y-%m-%d %H:%M} UTC ({span(left.total_seconds())})"
        after = ("; a new one is minted whenever it expires" if self.source == "password"
                 else "; it is not renewed: set a fresh one, or a password login, before then")
        return f"{self.host}: logged in as {who} with {how}; {until}{after}"


def span(seconds: float) -> str:
    """'in 6 d 23 h', 'in 59 min', or 'expired 2 h ago'."""
    ahead = seconds >= 0
    left = abs(int(seconds))
    days, hours, minutes = left // 86400, left % 86400 // 3600, left % 3600 // 60
    text = f"{days} d {hours} h" if days else f"{hours} h {minutes} min" if hours else f"{minutes} min"
    return f"in {text}" if ahead else f"expired {text} ago"


def login_hosts(ingest: IngestConfig) -> list[tuple[str, int]]:
    """(API URL, version) to check for an ingest config: one per login host (v1 hosts log in on v2)."""
    wanted = [(V2_OF.get(ingest.api_v2_url.rstrip("/"), ingest.api_v2_url), 2),
              (V2_OF.get(ingest.api_v1_url.rstrip("/"), ingest.api_v1_url),
               2 if ingest.api_v1_url.rstrip("/") in V2_OF else 1)]
    seen: dict[str, tuple[str, int]] = {}
    for url, version in wanted:
        seen.setdefault(login_host(url), (url, version))
    return list(seen.values())


def pipeline_ingest(cfg: Config, pipeline: str) -> IngestConfig:
    """The ingest settings of `pipeline` (a yearly template is read for this year)."""
    try:
        return cfg.for_pipeline(pipeline).ingest
    except ConfigError:
        if pipeline not in cfg.pipelines:
            raise
        return cfg.for_pipeline(f"{pipeline}-{datetime.now(UTC).year}").ingest


def check_login(baseurl: str, api_version: int, ingest: IngestConfig) -> Identity:
    """Log in (or take OPENREVIEW_TOKEN) for `baseurl` and ask who we are; one-line refusals."""
    from tasks.stages.ingest.openreview_client import make_client

    login = current_login(baseurl, api_version)
    if not login.logged_in:
        raise AuthenticationError(f"no OpenReview login for {baseurl}: OpenReview refuses guests; {WHAT_TO_SET}")
    client = make_client(api_version, baseurl, ingest, login=login)
    answers: list[requests.Response] = []
    client.session.hooks["response"].append(lambda response, *args, **kwargs: answers.append(response))
    try:
        own = client.get_profile()
        profile = getattr(own, "id", None)
        emails = (getattr(own, "content", None) or {}).get("emails") or []
    except (requests.ConnectionError, requests.Timeout, requests.exceptions.RetryError) as error:
        raise AuthenticationError(f"OpenReview at {baseurl} did not answer ({type(error).__name__})") from None
    except openreview.OpenReviewException:
        status = answers[-1].status_code if answers else None
        if status not in PROFILE_ANSWERS:   # a server error says nothing about the login
            reason = f"{status} {answers[-1].reason}".strip() if answers else "no answer"
            raise AuthenticationError(f"OpenReview at {baseurl} answered {reason} when asked who the login is: "
                                      "the login was not checked") from None
        profile, emails = None, []    # the login held (a refusal raises above); no profile to show
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):   # a 200 not shaped as this API answers
        raise AuthenticationError(f"OpenReview at {baseurl} answered who the login is without a profile (not "
                                  "OpenReview's API shape): the login was not checked; check api_v2_url") from None
    claims = token_claims(token_now(login) or "")
    user = claims.get("user") if isinstance(claims.get("user"), dict) else {}
    profile = profile or (user.get("profile") or {}).get("id")
    username = login.username or (emails[0] if emails else None) or user.get("id")
    exp = claims.get("exp")
    expires = datetime.fromtimestamp(exp, UTC) if isinstance(exp, int | float) else None
    return Identity(login_host(baseurl), login.source, username, profile, expires)


def token_claims(token: str) -> dict[str, Any]:
    """The claims of a JWT, read without checking its signature; {} for any other token."""
    import jwt

    try:
        claims = jwt.decode(token, options={"verify_signature": False, "verify_exp": False})
    except jwt.PyJWTError:
        return {}
    return claims if isinstance(claims, dict) else {}


def check_pipeline_login(cfg: Config, pipeline: str) -> list[Identity]:
    """The login of every host `pipeline` ingests from; the first refusal stops (one line)."""
    ingest = pipeline_ingest(cfg, pipeline)
    return [check_login(url, version, ingest) for url, version in login_hosts(ingest)]


def needs_login(cfg: Config, pipeline: str) -> bool:
    """Whether `pipeline` reads OpenReview (its source, with an ingest stage)."""
    spec = cfg.pipelines.get(pipeline) or cfg.pipelines.get(pipeline.rsplit("-", 1)[0])
    return spec is not None and spec.source == "openreview" and "ingest" in spec.stages


def credentials_set() -> str:
    """Which OpenReview credentials the environment sets (names only, never values)."""
    named = [name for name in CREDENTIAL_ENVS if os.environ.get(name, "").strip()]
    return ", ".join(named) if named else "none"
