"""The offline demo's doubles, registered with the layers below by the layer that runs a pipeline
(flows/__init__.py, so `grebench run`, a deployment and a flow called from a test all get them).

    base_url "served:<model>"      the local OpenAI-compatible server on the local `model`
                                   (openai_server.py; started on first use, once per process)
    source = "synthetic"           the generated venues (synthetic.py) behind the local
                                   OpenReview-compatible server (openreview_server.py)

Registering starts nothing; no module under tasks/lm, tasks/metrics or tasks/stages imports this package.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tasks.core.config import Config
from tasks.lm import register_base_url_scheme
from tasks.stages.ingest.sources import VenueSource, register_venue_source, synthetic_source
from tasks.testing.openai_server import serve_local_model
from tasks.testing.openreview_server import serve_venues
from tasks.testing.synthetic import make_venue


@contextmanager
def synthetic_venues(cfg: Config, pipeline: str) -> Iterator[dict[str, VenueSource]]:
    """Each venue of a "synthetic" pipeline generated from its settings and served by the local
    OpenReview server for the duration of the block, its raw cache keyed by those settings."""
    spec = cfg.pipelines[pipeline]
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


def register_doubles() -> None:
    """Register "served:" base URLs and the "synthetic" venue source (idempotent)."""
    register_base_url_scheme("served", serve_local_model)
    register_venue_source("synthetic", synthetic_venues)
