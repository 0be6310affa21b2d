"""The yearly refresh: one parent flow that runs every stage for the year's venues.

Each stage skips work already done (cached raw pages, finished shards, cached LLM answers), so a
rerun or a resumed run only does what is missing. `grebench schedule` registers this flow as a
Prefect deployment with a yearly cron schedule. A run that reads OpenReview checks its login when it
starts (and `grebench schedule` when it registers): a missing or refused login stops it in one line.

Which cycle a run pulls: without an explicit year each `{year}` venue template takes the freshest
cycle of its venue family whose reviews are public on the run's date (tasks/core/venue_facts.py): the
run of 15 December 2025 pulls ICLR.cc/2026/Conference (reviews public since November 2025) and
NeurIPS.cc/2025/Conference. An explicit `year` fills every template with that year.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from prefect import flow

from flows.pipeline import pipeline_flow
from tasks.checks import load_checked_config
from tasks.core.config import Config, ScheduleConfig
from tasks.core.summary import StageSummary


@flow(name="yearly-refresh", log_prints=True)
def refresh_flow(
    year: int | None = None,
    venues: list[str] | None = None,
    pipeline: str = "refresh",
    config_path: str = "pipelines.toml",
    on: str | None = None,
) -> dict[str, StageSummary]:
    """Run `pipeline` on its venues (or on `venues`): for `year` when given, else each venue family's
    freshest public cycle on the date `on` (ISO date; default: today)."""
    day = date.fromisoformat(on) if on else datetime.now(UTC).date()
    if year is None and not venues:
        venues = planned_venues(load_checked_config(config_path), pipeline, day)
    year = year or day.year
    # a venue without a [venues."<id>"] table is read with its own review form (ingest/review_form.py)
    require_login(load_checked_config(config_path), f"{pipeline}-{year}")   # before any request for data
    summary = pipeline_flow(pipeline=f"{pipeline}-{year}", config_path=config_path, venues=venues or None)
    write_site(load_checked_config(config_path), f"{pipeline}-{year}")
    return summary


def require_login(cfg: Config, pipeline: str) -> None:
    """A run that reads OpenReview checks its login first: missing or refused, it stops in one line
    (`AuthenticationError`) before any work; the login it mints is the run's (tasks/stages/ingest/auth.py)."""
    from tasks.stages.ingest.login_check import check_pipeline_login, needs_login

    if needs_login(cfg, pipeline):
        for identity in check_pipeline_login(cfg, pipeline):
            print(identity.line())


def write_site(cfg: Config, pipeline: str) -> None:
    """The refresh ends by rendering the static site from its results database (`grebench site`)."""
    from tasks.report.site import build_site

    database = cfg.database_for(pipeline)
    if not database.is_file():
        print(f"no results database at {database}: the site is not written")
        return
    site = build_site(database, database.parent / "site" if cfg.per_pipeline_database else cfg.data_dir / "site")
    print(f"site: {len(site.pages)} pages in {site.out_dir}, open {site.index.resolve().as_uri()}")


def planned_venues(cfg: Config, pipeline: str, on: date) -> list[str]:
    """The venue ids a refresh of `pipeline` on `on` pulls (tasks/core/venue_facts.py: freshest public cycle)."""
    from tasks.core.config import ConfigError
    from tasks.core.venue_facts import FactsError, plan

    if pipeline not in cfg.pipelines:
        raise ConfigError(f"unknown pipeline {pipeline!r} (known: {', '.join(sorted(cfg.pipelines)) or 'none'})")
    try:
        return [p.venue_id for p in plan(cfg.pipelines[pipeline].venues, on)]
    except FactsError as error:
        raise ConfigError(f"pipelines.{pipeline}.venues: {error}") from None


def describe_plan(cfg: Config, on: date, runs: list[datetime], offline: bool = False) -> list[str]:
    """Lines saying which venue ids a run on `on` and each of the next `runs` would pull, the review
    form each venue of the first two runs is read with, and the PDFs and hours the sample needs.
    `offline` (a dry run): no request is sent and nothing is created; a form is shown only when its
    venue table or the raw cache has it."""
    from tasks.core.venue_facts import plan

    schedule = cfg.schedule
    templates = schedule.venues or cfg.pipelines[schedule.pipeline].venues
    lines, forms = [], []
    for k, (label, day) in enumerate(((f"a run on {on.isoformat()}", on),
                                      *((f"the run of {t.isoformat()}", t.date()) for t in runs))):
        planned = plan(templates, day)
        shown = [p.venue_id + (f" (reviews public since {p.public_since.isoformat()})" if p.public_since else "")
                 for p in planned]
        lines.append(f"{label} pulls: {', '.join(shown)}")
        if k < 2:   # now and the next run: the forms they will use
            forms += [p.venue_id for p in planned if p.venue_id not in forms]
    lines += [f"form of {venue}: {cached_form_line(cfg, venue) if offline else form_line(cfg, venue)}"
              for venue in forms]
    lines.append(pdf_plan(cfg, len(plan(templates, on))))
    return lines


def form_line(cfg: Config, venue_id: str) -> str:
    """The review form a run will read `venue_id` with, or why it can be read only when the run fires."""
    from tasks.core.errors import GrebenchError
    from tasks.stages.ingest.fetch import lookup_form
    from tasks.stages.ingest.review_form import review_invitation_id

    try:
        form = lookup_form(cfg, venue_id, quick=True)
    except GrebenchError as error:
        return f"read from {review_invitation_id(venue_id, None)} when the run fires (now: {str(error).splitlines()[0]})"
    except Exception as error:  # noqa: BLE001 - a plan offline still prints; the run reads the form
        from tasks.stages.ingest.auth import describe

        said = describe(error) if error.args and isinstance(error.args[0], dict) else type(error).__name__
        return f"read from {review_invitation_id(venue_id, None)} when the run fires (not readable now: {said})"
    return "the venue table in pipelines.toml" if form.rule == "table" else f"derived, {form.describe()}"


def cached_form_line(cfg: Config, venue_id: str) -> str:
    """`form_line` from what is on disk only: the venue table, else the invitation in the raw cache."""
    import json

    from tasks.core.errors import GrebenchError
    from tasks.core.layout import slug
    from tasks.stages.ingest.review_form import derive_form, review_invitation_id
    from tasks.stages.ingest.sources import url_source

    if venue_id in cfg.venues:
        return "the venue table in pipelines.toml"
    api_version = cfg.venue(venue_id).api_version(venue_id)
    base = cfg.ingest.api_v1_url if api_version == 1 else cfg.ingest.api_v2_url
    cached = (cfg.data_dir / "raw" / slug(url_source(base)) / slug(venue_id) / f"v{api_version}"
              / "review_invitation.json")
    later = f"read from {review_invitation_id(venue_id, None)} when the run fires"
    try:
        form = derive_form(venue_id, json.loads(cached.read_text(encoding="utf-8")), None, cfg.curate.common_scale,
                           cfg.curate.confidence_range)
    except (OSError, ValueError, AttributeError):
        return f"{later} (not in the raw cache; a dry run sends no request)"
    except GrebenchError as error:
        return f"{later} (the cached form: {str(error).splitlines()[0]})"
    return f"derived from the raw cache, {form.describe()}"


def pdf_plan(cfg: Config, venues: int) -> str:
    """PDFs the sample needs per run and how long they take at the configured logged-in rate."""
    ingest, count = cfg.ingest, venues * cfg.curate.sample_size
    if not ingest.pdf:
        return "PDFs: none ([ingest] pdf = false)"
    if ingest.pdf_scope != "sample":
        return f"PDFs: every {ingest.pdf_scope} paper ([ingest] pdf_scope = {ingest.pdf_scope!r}); see bench/cost/refresh_cost.py"
    rate = ingest.logged_in_pdfs_per_hour
    eta = f", about {count / rate:.1f} h at {rate:g} an hour" if rate else ""
    return f"PDFs: at most {count} ({cfg.curate.sample_size} sampled papers x {venues} venues){eta}"


def deployment_parameters(schedule: ScheduleConfig, config_path: str) -> dict[str, Any]:
    """Parameters the scheduled runs get; `year` is left out so each run takes its own year."""
    return {"venues": list(schedule.venues) or None, "pipeline": schedule.pipeline, "config_path": config_path}


def build_deployment(cfg: Config, config_path: str) -> Any:
    """The refresh deployment with its yearly cron schedule (not registered yet)."""
    from prefect.schedules import Cron

    schedule = cfg.schedule
    cfg.for_pipeline(f"{schedule.pipeline}-{datetime.now(UTC).year}")  # the template must resolve
    return refresh_flow.to_deployment(
        name=schedule.deployment,
        schedules=[Cron(schedule.cron, timezone=schedule.timezone)],
        parameters=deployment_parameters(schedule, config_path),
        description=f"GRE-bench yearly refresh of pipeline {schedule.pipeline!r}",
        tags=["grebench", "yearly"],
    )


def next_runs(cron: str, timezone: str, count: int = 3, start: datetime | None = None) -> list[datetime]:
    """The next `count` times `cron` fires after `start` (default: now)."""
    from zoneinfo import ZoneInfo

    from cronsim import CronSim

    zone = ZoneInfo(timezone)
    it = CronSim(cron, start.astimezone(zone) if start else datetime.now(zone))
    return [next(it) for _ in range(count)]
