"""Where a pipeline's venues come from: the real OpenReview API or the local synthetic server."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tasks.core.config import Config


@contextmanager
def venue_source(cfg: Config, pipeline: str) -> Iterator[dict[str, str | None]]:
    """Yield each venue's API base URL for the duration of the block.

    For an "openreview" pipeline the URL is None (ingest uses the configured API URLs). For a
    "synthetic" pipeline the project's generated venues are served by the local
    OpenReview-compatible server, so the run goes through the real client with no network.
    """
    spec = cfg.pipelines[pipeline]
    if spec.source == "openreview":
        yield {venue: None for venue in spec.venues}
        return
    from tasks.testing.openreview_server import serve_venues
    from tasks.testing.synthetic import make_venue

    options = spec.synthetic
    venues = [
        make_venue(
            venue,
            n_papers=options.n_papers,
            reviews_per_paper=options.reviews_per_paper,
            seed=options.seed + i,
            pdfs=options.pdfs,
            bad_cases=options.bad_cases,
        )
        for i, venue in enumerate(spec.venues)
    ]
    with serve_venues(venues) as server:
        yield {
            venue: server.v1_url if cfg.venue(venue).api_version(venue) == 1 else server.v2_url
            for venue in spec.venues
        }
