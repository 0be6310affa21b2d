"""Venue facts as data (tasks/core/venue_families.toml), and the review calendar they imply.

Per venue family (ICLR, NeurIPS, ICML): the venue id pattern, the eras of years that share an API,
a submission listing, a review form (string or integer scores), what an outsider can read and
the `source_limits` that follow; and when a year's reviews become public. From that calendar
`freshest_year` picks the newest cycle whose reviews are public on a date: on 2025-12-15 that is
ICLR 2026 (reviews public since November 2025), not ICLR 2025.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from datetime import date
from functools import cache
from pathlib import Path
from typing import Any

FACTS = Path(__file__).with_name("venue_families.toml")


class FactsError(ValueError):
    """A venue the facts do not cover, phrased as one line."""


@dataclass(frozen=True)
class Era:
    """Years of a family that share an API, a listing and a form."""

    first: int
    last: int | None
    api: str
    listing: str
    submissions: tuple[str, ...]
    scores: str
    exposes: str
    source_limits: tuple[str, ...] = ()
    decision_venueids: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    edit_history: str = "public"     # "hidden": outsiders cannot read the submission and review edits

    def covers(self, year: int) -> bool:
        return self.first <= year and (self.last is None or year <= self.last)


@dataclass(frozen=True)
class Cycle:
    """What happened in one year's review cycle of a family (dates from its sources)."""

    year: int
    reviews_released: date | None
    events: tuple[tuple[date, str], ...]          # (day, what happened), oldest first
    source_limits: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class Family:
    name: str
    venue: str                                     # venue id pattern with {year}
    eras: tuple[Era, ...]
    reviews_public: tuple[int, int, int] | None   # (month, day, year offset) or None: unknown
    calendar_sources: tuple[str, ...] = ()
    cycles: dict[int, Cycle] = field(default_factory=dict, compare=False)
    pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        regex = re.escape(self.venue).replace(re.escape("{year}"), r"(?P<year>20\d\d)")
        object.__setattr__(self, "pattern", re.compile(regex))

    def venue_id(self, year: int) -> str:
        return self.venue.replace("{year}", str(year))

    def era(self, year: int) -> Era | None:
        return next((e for e in self.eras if e.covers(year)), None)

    def public_on(self, year: int) -> date | None:
        """The day the reviews of cycle `year` are public (None: the calendar is unknown)."""
        if self.reviews_public is None:
            return None
        month, day, offset = self.reviews_public
        return date(year + offset, month, day)

    def freshest_year(self, on: date) -> int:
        """The newest cycle whose reviews are public on `on`."""
        if self.reviews_public is None:
            raise FactsError(f"{self.name}: no review calendar in {FACTS.name}: give the year explicitly")
        month, day, offset = self.reviews_public
        return on.year - offset - (0 if (on.month, on.day) >= (month, day) else 1)


@cache
def families(path: Path = FACTS) -> dict[str, Family]:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    known = set(data.get("sources", {}))
    out = {}
    for name, raw in data["families"].items():
        eras = tuple(_era(name, e, known) for e in raw.get("eras", []))
        calendar = raw.get("reviews_public")
        public = (int(calendar["month"]), int(calendar["day"]), int(calendar.get("year_offset", 0))) if calendar else None
        cycles = {int(y): _cycle(name, int(y), c, known) for y, c in raw.get("cycles", {}).items()}
        out[name] = Family(name, raw["venue"], eras, public, tuple(raw.get("calendar_sources", ())), cycles)
    return out


def _cycle(family: str, year: int, raw: dict[str, Any], known: set[str]) -> Cycle:
    unknown = [s for s in raw.get("sources", ()) if s not in known]
    if unknown:
        raise FactsError(f"{FACTS.name}: family {family} cycle {year}: unknown sources {unknown}")
    events = tuple(sorted((e["on"], e["what"]) for e in raw.get("events", [])))
    return Cycle(year, raw.get("reviews_released"), events, tuple(raw.get("source_limits", ())),
                 tuple(raw.get("sources", ())))


def cycle_of(venue_id: str) -> Cycle | None:
    """The recorded facts of the venue's own review cycle (e.g. ICLR 2026's revert), else None."""
    found = lookup(venue_id)
    return found[0].cycles.get(found[1]) if found else None


def sources(path: Path = FACTS) -> dict[str, str]:
    return dict(tomllib.loads(path.read_text(encoding="utf-8")).get("sources", {}))


def _era(family: str, raw: dict[str, Any], known: set[str]) -> Era:
    unknown = [s for s in raw.get("sources", ()) if s not in known]
    if unknown:
        raise FactsError(f"{FACTS.name}: family {family}: unknown sources {unknown}")
    return Era(first=int(raw["first"]), last=raw.get("last"), api=raw["api"], listing=raw["listing"],
               submissions=tuple(raw.get("submissions", ())), scores=raw["scores"], exposes=raw["exposes"],
               source_limits=tuple(raw.get("source_limits", ())),
               decision_venueids=tuple(raw.get("decision_venueids", ())), sources=tuple(raw.get("sources", ())),
               edit_history=raw.get("edit_history", "public"))


def lookup(venue_id: str) -> tuple[Family, int] | None:
    """(family, year) of a venue id the facts know, else None."""
    for family in families().values():
        match = family.pattern.fullmatch(venue_id)
        if match:
            return family, int(match.group("year"))
    return None


def era_of(venue_id: str) -> Era | None:
    found = lookup(venue_id)
    return found[0].era(found[1]) if found else None


def history_hidden(venue_id: str) -> bool:
    """Do the facts say an outsider cannot read this venue's edit history?"""
    era = era_of(venue_id)
    return era is not None and era.edit_history == "hidden"


def facts_limits(venue_id: str) -> tuple[str, ...]:
    """What the venue's source cannot give, as its family's facts state it (empty when unknown)."""
    era, cycle = era_of(venue_id), cycle_of(venue_id)
    return (*(era.source_limits if era else ()), *(cycle.source_limits if cycle else ()))


def family_of_template(template: str) -> Family | None:
    """The family whose venue pattern is `template` (a venue id with {year})."""
    return next((f for f in families().values() if f.venue == template), None)


@dataclass(frozen=True)
class PlannedVenue:
    template: str
    venue_id: str
    public_since: date | None     # None: the template named a fixed venue


def plan(templates: tuple[str, ...] | list[str], on: date) -> list[PlannedVenue]:
    """The venue ids a refresh on `on` pulls: each `{year}` template filled with the freshest cycle
    of its family; a template without a family calendar is an error (one line)."""
    out = []
    for template in templates:
        if "{year}" not in template:
            out.append(PlannedVenue(template, template, None))
            continue
        family = family_of_template(template)
        if family is None:
            raise FactsError(f"no review calendar for {template!r}: add its family to {FACTS.name} "
                             "(when its reviews become public) or run the refresh with an explicit year")
        year = family.freshest_year(on)
        out.append(PlannedVenue(template, family.venue_id(year), family.public_on(year)))
    return out
