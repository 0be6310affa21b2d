"""`grebench venues`: a year's OpenReview venues from the group tree, with what each exposes.

The venue list is the `venues` group's members (the group OpenReview keeps of every venue; it
answers guests); each venue the facts cover (tasks/core/venue_families.toml) shows its family's API,
listing, score form, review calendar and source limits for that year, so adding a venue starts
from facts, not guesses.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from flows.cli.common import ConfigOption, fail, read_config


def venue_rows(members: list[str], year: int) -> list[dict[str, Any]]:
    """One row per venue of `year` among `members`, with its family's facts (or their absence)."""
    from tasks.core.venue_facts import lookup

    rows = []
    for venue_id in sorted(m for m in members if f"/{year}/" in f"{m}/"):
        found = lookup(venue_id)
        era = found[0].era(found[1]) if found else None
        if found is None or era is None:
            rows.append({"venue_id": venue_id, "family": found[0].name if found else None, "facts": False,
                         "exposes": "no facts recorded: add them to tasks/core/venue_families.toml, with sources"})
            continue
        family = found[0]
        public = family.public_on(found[1])
        rows.append({"venue_id": venue_id, "family": family.name, "facts": True, "api": era.api,
                     "listing": era.listing, "submissions": [s.replace("{venue}", venue_id) for s in era.submissions],
                     "scores": era.scores, "reviews_public": public.isoformat() if public else None,
                     "exposes": era.exposes, "source_limits": list(era.source_limits), "sources": list(era.sources)})
    return rows


def venues(
    year: Annotated[int | None, typer.Option("--year", "-y", help="the venues of this year (default: this year)")] = None,
    url: Annotated[str | None, typer.Option("--url", help="API v2 base URL (default: [ingest] api_v2_url)")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="print the rows as JSON")] = False,
    config: ConfigOption = None,
) -> None:
    """List a year's OpenReview venues (the `venues` group) with what each exposes."""
    import openreview
    import requests

    from tasks.core.errors import FatalError
    from tasks.stages.ingest.openreview_client import make_client

    cfg = read_config(config)
    year = year or datetime.now(UTC).year
    if not 2000 <= year <= 2100:
        fail(f"--year {year}: not a plausible year")
    base = url or cfg.ingest.api_v2_url
    try:
        client = make_client(2, base, cfg.ingest)
        members = client.get_group("venues").members or []
    except FatalError as error:
        fail(str(error).splitlines()[0])
    except openreview.OpenReviewException as error:
        from tasks.stages.ingest.auth import describe

        fail(f"{base}: the venues group could not be read ({describe(error)})")
    except requests.RequestException as error:
        fail(f"{base}: OpenReview did not answer ({type(error).__name__})")
    rows = venue_rows(list(members), year)
    if json_output:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo(f"no venues of {year} in the venues group at {base}")
        return
    typer.echo(f"{len(rows)} venue(s) of {year} at {base}:")
    for row in rows:
        if not row["facts"]:
            typer.echo(f"- {row['venue_id']}: {row['exposes']}")
            continue
        typer.echo(f"- {row['venue_id']} [{row['family']}, API {row['api']}, listed by {row['listing']} "
                   f"{', '.join(row['submissions'])}, {row['scores']} scores, reviews public from "
                   f"{row['reviews_public'] or 'unknown'}]")
        typer.echo(f"    exposes: {row['exposes']}")
        for limit in row["source_limits"]:
            typer.echo(f"    limit:   {limit}")
