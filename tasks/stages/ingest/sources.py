"""Where a pipeline's venues come from: the real OpenReview API or a server registered for its source
(the local synthetic one, registered by the flows), and the key of each source's raw download cache (`data/raw/<source>/<venue>/v<N>/`, tasks/core/layout.py).

The key names what produced the pages, so no pipeline reads pages another source wrote: for an API,
its scheme, host and port ("https-api2.openreview.net", "http-127.0.0.1_8765"); for the generated
venues of a "synthetic" pipeline, a short hash of the settings that generate them
("synthetic-3f9a0c1d2e4b"), whatever port the local server got this run. An address names only
the official API: the cache of any other server also keeps a fingerprint of what it served
(tasks/stages/ingest/source_identity.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tasks.core.config import Config, ConfigError


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


# Where the venues of a pipeline whose `source` is not "openreview" come from: a server the layer
# that runs the pipeline registers (tasks/testing/demo.py registers "synthetic"; a stage never
# imports a test double). Given the config and the pipeline, it yields each venue's source.
SourceOpener = Callable[[Config, str], AbstractContextManager[dict[str, VenueSource]]]
_OPENERS: dict[str, SourceOpener] = {}


def register_venue_source(source: str, opener: SourceOpener) -> None:
    """A pipeline with `source = "<source>"` gets its venues from `opener(cfg, pipeline)`."""
    _OPENERS[source] = opener


@contextmanager
def venue_source(cfg: Config, pipeline: str) -> Iterator[dict[str, VenueSource]]:
    """Yield each venue's source for the duration of the block.

    For an "openreview" pipeline the URL is None (ingest uses the configured API URLs, and keys the
    cache by them). Any other source is served by the opener registered for it: for "synthetic", the
    project's generated venues behind the local OpenReview-compatible server, so the run goes
    through the real client with no network, the cache keyed by the settings that generate each
    venue (`synthetic_source`).
    """
    spec = cfg.pipelines[pipeline]
    if spec.source == "openreview":
        yield {venue: VenueSource() for venue in spec.venues}
        return
    if spec.source not in _OPENERS:
        raise ConfigError(f"pipelines.{pipeline}: source {spec.source!r} has no server registered in this process "
                          "(the flows register it: tasks.testing.demo.register_doubles)")
    with _OPENERS[spec.source](cfg, pipeline) as sources:
        yield sources
