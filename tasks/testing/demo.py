"""The offline demo's doubles, registered with the layers below by the layer that runs a pipeline
(flows/__init__.py, so `grebench run`, a deployment and a flow called from a test all get them).

    base_url "served:<model>"      the local OpenAI-compatible server on the local `model`
                                   (openai_server.py; started on first use, once per process)
    source = "synthetic"           the generated venues (synthetic.py) behind the local
                                   OpenReview-compatible server (openreview_server.py)

Registering starts nothing; no module under tasks/lm, tasks/metrics or tasks/stages imports this package.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tasks.core.config import Config, SyntheticSource
from tasks.lm import register_base_url_scheme
from tasks.stages.ingest.auth import CREDENTIAL_ENVS, PASSWORD_ENV, USERNAME_ENV, forget_minted
from tasks.stages.ingest.sources import VenueSource, register_venue_source, synthetic_source
from tasks.testing.openai_server import serve_local_model
from tasks.testing.openreview_server import Policy, serve_venues
from tasks.testing.synthetic import make_venue

LOCAL_ACCOUNT = "rehearsal@grebench.local"


def venue_settings(options: SyntheticSource, index: int) -> dict[str, object]:
    """The arguments `make_venue` gets for the `index`-th venue (also its raw cache's key): the shape
    settings past the first five only where they differ from their defaults, so the keys of venues
    generated before those settings existed stay as they were."""
    settings: dict[str, object] = {"n_papers": options.n_papers, "reviews_per_paper": options.reviews_per_paper,
                                   "seed": options.seed + index, "pdfs": options.pdfs, "bad_cases": options.bad_cases}
    defaults = SyntheticSource()
    settings.update({k: getattr(options, k) for k in ("form", "reverted") if getattr(options, k) != getattr(defaults, k)})
    return settings


@contextmanager
def local_account(policy: Policy) -> Iterator[None]:
    """For a server that refuses guests: an account of its own, given to the run through the usual
    OPENREVIEW_USERNAME / OPENREVIEW_PASSWORD for the duration of the block (any credential of the
    environment is set aside meanwhile and put back after)."""
    if policy.guests:
        yield
        return
    password = secrets.token_urlsafe(16)
    policy.accounts[LOCAL_ACCOUNT] = password
    saved = {k: os.environ.pop(k) for k in CREDENTIAL_ENVS if k in os.environ}
    os.environ.update({USERNAME_ENV: LOCAL_ACCOUNT, PASSWORD_ENV: password})
    try:
        yield
    finally:
        for key in CREDENTIAL_ENVS:
            os.environ.pop(key, None)
        os.environ.update(saved)
        forget_minted()


def server_policy(options: SyntheticSource) -> Policy:
    """"open": the lenient server; "today": OpenReview's 2026 policy with its times scaled."""
    return Policy() if options.access == "open" else Policy.today().scaled(options.time_scale)


def request_log(cfg: Config, pipeline: str) -> Path:
    """Where a synthetic pipeline's server logs the requests it answered (`request_log = true`)."""
    return cfg.data_dir / pipeline / "server" / "requests.jsonl"


@contextmanager
def synthetic_venues(cfg: Config, pipeline: str) -> Iterator[dict[str, VenueSource]]:
    """Each venue of a "synthetic" pipeline generated from its settings and served by the local
    OpenReview server for the duration of the block, its raw cache keyed by those settings."""
    spec = cfg.pipelines[pipeline]
    options = spec.synthetic
    settings = {venue: venue_settings(options, i) for i, venue in enumerate(spec.venues)}
    venues = [make_venue(venue, **settings[venue]) for venue in spec.venues]
    log = request_log(cfg, pipeline) if options.request_log else None
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
    policy = server_policy(options)
    with local_account(policy), serve_venues(venues, policy=policy, request_log=log) as server:
        yield {
            venue: VenueSource(server.v1_url if cfg.venue(venue).api_version(venue) == 1 else server.v2_url,
                               synthetic_source(settings[venue]))
            for venue in spec.venues
        }


def register_doubles() -> None:
    """Register "served:" base URLs and the "synthetic" venue source (idempotent)."""
    register_base_url_scheme("served", serve_local_model)
    register_venue_source("synthetic", synthetic_venues)
