"""`grebench venues`: a year's OpenReview venues from the group tree, with what each exposes.

The venue list is the `venues` group's members (the group OpenReview keeps of every venue; it
answers guests); each venue the facts cover (tasks/core/venue_families.toml) shows its family's API,
listing, score form, review calendar and source limits for that year, so adding a venue starts
from facts, not guesses.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from flows.cli.common import ConfigOption, fail, read_config


def venue_rows(members: list[str], year: int) -> list[dict[str, Any]]:
    """One row per venue of `year` among `members`, with its family's facts (or their absence)."""
    from tasks.core.venue_facts import cycle_of, lookup

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
        cycle = cycle_of(venue_id)
        if cycle is not None:
            rows[-1].update(events=[f"{day.isoformat()}: {what}" for day, what in cycle.events],
                            source_limits=[*era.source_limits, *cycle.source_limits],
                            sources=list(dict.fromkeys([*era.sources, *cycle.sources])))
    return rows


def venues(
    year: Annotated[int | None, typer.Option("--year", "-y", help="the venues of this year (default: this year)")] = None,
    url: Annotated[str | None, typer.Option("--url", help="API v2 base URL (default: [ingest] api_v2_url)")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="print the rows as JSON")] = False,
    form: Annotated[str | None, typer.Option("--form", help="print the review form a run reads VENUE with")] = None,
    config: ConfigOption = None,
) -> None:
    """List a year's OpenReview venues (the `venues` group) with what each exposes, or (--form) the
    review form of one venue: its venue table, else the form read from its review invitation."""

    from tasks.stages.ingest.openreview_client import make_client

    cfg = read_config(config)
    if form is not None:
        show_form(cfg, form, url, json_output)
        return
    year = year or datetime.now(UTC).year
    if not 2000 <= year <= 2100:
        fail(f"--year {year}: not a plausible year")
    base = url or cfg.ingest.api_v2_url
    with one_line(base, "the venues group"):
        client = make_client(2, base, cfg.ingest)
        members = client.get_group("venues").members or []
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
        for event in row.get("events", []):
            typer.echo(f"    event:   {event}")
        for limit in row["source_limits"]:
            typer.echo(f"    limit:   {limit}")


@contextmanager
def one_line(subject: str, what: str) -> Iterator[None]:
    """OpenReview's refusals and silences inside the block as one `error:` line about `subject`."""
    import openreview
    import requests

    from tasks.core.errors import GrebenchError
    from tasks.stages.ingest.auth import describe

    try:
        yield
    except GrebenchError as error:
        fail(str(error).splitlines()[0])
    except openreview.OpenReviewException as error:
        fail(f"{subject}: {what} could not be read ({describe(error)})")
    except requests.RequestException as error:
        fail(f"{subject}: OpenReview did not answer ({type(error).__name__})")


def show_form(cfg: Any, venue_id: str, url: str | None, json_output: bool) -> None:
    """`grebench venues --form VENUE`: the form, its options and the mapping onto the common scale."""

    from tasks.core.config import check_venue_id
    from tasks.core.errors import printable
    from tasks.stages.ingest.fetch import lookup_form
    from tasks.stages.ingest.review_form import LABEL_CHARS, option_key

    try:
        check_venue_id(venue_id)
    except ValueError as error:
        fail(str(error))
    with one_line(venue_id, "the review form"):
        found = lookup_form(cfg, venue_id, url)
    if json_output:
        typer.echo(json.dumps(found.to_json(), indent=2))
        return
    if found.rule == "table":
        typer.echo(f"{venue_id}: the venue table in pipelines.toml (it overrides the venue's own form)")
        typer.echo("  rating_map: " + ", ".join(f"{k} -> {v:g}" for k, v in found.rating_map.items()))
        return
    typer.echo(f"{venue_id}: read from {printable(found.source, 300)} ({found.rule} rule, docs/openreview.md)")
    typer.echo(f"  rating field {printable(repr(found.rating_field), 300)}:")
    for option in found.rating_options:
        point = found.rating_map.get(option_key(option.value))
        typer.echo(f"    {printable(option.label, LABEL_CHARS)}  ->  {'-' if point is None else f'{point:g}'}")
    if found.confidence_field:
        typer.echo(f"  confidence field {found.confidence_field!r}: "
                   + ", ".join(f"{o.value:g}" for o in found.confidence_options))
