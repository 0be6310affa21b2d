"""Where a pipeline's venues come from: the real OpenReview API or the local synthetic server, and
the key of each source's raw download cache (`data/raw/<source>/<venue>/v<N>/`, tasks/core/layout.py).

The key names what produced the pages, so no pipeline reads pages another source wrote: for an API,
its scheme, host and port ("https-api2.openreview.net", "http-127.0.0.1_8765"); for the generated
venues of a "synthetic" pipeline, a short hash of the settings that generate them
("synthetic-3f9a0c1d2e4b"), whatever port the local server got this run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tasks.core.config import Config


@dataclass(frozen=True)
class VenueSource:
    """A venue's API base URL (None: the configured OpenReview API) and its raw-cache key (None: from the URL)."""

    baseurl: str | None = None
    cache_key: str | None = None


def url_source(baseurl: str) -> str:
    """The raw-cache key of an API: scheme, host and port of `baseurl` ("https-api2.openreview.net")."""
    parts = urlsplit(baseurl)
    if not parts.scheme or not parts.hostname:
        raise ValueError(f"API URL {baseurl!r}: no scheme or host")
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}-{parts.hostname.lower()}{port}"


def synthetic_source(settings: dict[str, Any]) -> str:
    """The raw-cache key of a generated venue: "synthetic-" and a short hash of `settings` (the
    arguments `make_venue` gets)."""
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    return f"synthetic-{digest}"


@contextmanager
def venue_source(cfg: Config, pipeline: str) -> Iterator[dict[str, VenueSource]]:
    """Yield each venue's source for the duration of the block.

    For an "openreview" pipeline the URL is None (ingest uses the configured API URLs, and keys the
    cache by them). For a "synthetic" pipeline the project's generated venues are served by the
    local OpenReview-compatible server, so the run goes through the real client with no network;
    the cache is keyed by the settings that generate each venue.
    """
    spec = cfg.pipelines[pipeline]
    if spec.source == "openreview":
        yield {venue: VenueSource() for venue in spec.venues}
        return
    from tasks.testing.openreview_server import serve_venues
    from tasks.testing.synthetic import make_venue

    options = spec.synthetic
    settings = {
        venue: {"n_papers": options.n_papers, "reviews_per_paper": options.reviews_per_paper,
                "seed": options.seed + i, "pdfs": options.pdfs, "bad_cases": options.bad_cases}
        for i, venue in enumerate(spec.venues)
    }
    venues = [make_venue(venue, **settings[venue]) for venue in spec.venues]
    with serve_venues(venues) as server:
        yield {
            venue: VenueSource(server.v1_url if cfg.venue(venue).api_version(venue) == 1 else server.v2_url,
                               synthetic_source(settings[venue]))
            for venue in spec.venues
        }
