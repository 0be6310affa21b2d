"""Ingest one OpenReview venue: submissions with their replies, in bulk, into Parquet.

Submissions are pulled page by page with their replies (`details=directReplies`), never one call
per paper, through the real `openreview-py` client (API v1 or v2, per venue). Each page is saved
under `data/raw/<source>/<venue>/v<N>/` (the source: the API host, or the synthetic settings;
tasks/stages/ingest/sources.py) as it arrives (temp file + rename), so a rerun downloads nothing
already saved and a crashed run resumes where it stopped. A page that stays malformed after
retries is recorded in rejects (entity "page") and the run goes on. Outputs in `out_dir`:
papers, reviews, rejects (and pdf_texts) .parquet, each rewritten whole, so reruns are idempotent.
Every review met is either kept or rejected with a rule: reviews_ingested = reviews + review rejects.

Order of work, cheapest first: the notes and reviews (a few hundred pages), the review form (the
venue table, else the venue's own official-review invitation: review_form.py), the histories of
reviews edited after posting, then the papers later stages read (`select`, given by the ingest flow:
the benchmark sample the curate rules draw, `[ingest] pdf_scope`), and only for those the PDF
histories and the PDFs, paced at one PDF per 100 s under OpenReview's 2026 limit of 36 an hour.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import openreview
import polars as pl
import requests

from tasks.core.config import Config, IngestConfig, VenueConfig
from tasks.core.errors import SourceError
from tasks.core.layout import UnsafePath, id_path, raw_dir, slug, write_parquet
from tasks.core.locks import locked, write_bytes_atomic
from tasks.core.progress import progress
from tasks.core.schema import PAPERS, REJECTS, REVIEWS, conform, empty
from tasks.core.summary import StageSummary
from tasks.core.venue_facts import history_hidden
from tasks.stages.ingest.forms import normalise_submission, reject, value
from tasks.stages.ingest.openreview_client import make_client
from tasks.stages.ingest.raw_cache import quarantine, read_cached
from tasks.stages.ingest.review_form import ReviewForm, checked_table_form, read_form, save_form, table_form
from tasks.stages.ingest.source_identity import (
    fingerprint,
    holds_cache,
    identified_by_address,
    move_aside,
    store_fingerprint,
    stored_fingerprint,
)
from tasks.stages.ingest.sources import url_source
from tasks.stages.ingest.throttle import Throttle
from tasks.stages.ingest.versions import (
    VersionStats,
    download_source,
    pdf_versions,
    review_versions,
    without_history,
)

# (papers, reviews, the venue's table or derived form) -> ids of the papers later stages read
PaperSelector = Callable[[pl.DataFrame, pl.DataFrame, VenueConfig], Collection[str]]

log = logging.getLogger(__name__)
IDENTITY_KEYS = ("signatures", "writers", "readers", "nonreaders", "tauthor")
PRIVATE_CONTENT = ("authors", "authorids")
DETAILS = "directReplies"
SORT = "number:asc"
# a paper's files in pdfs/: the PDF, a permanent failure, the version on disk, "the server sent it damaged"
PDF_FILES = (".pdf", ".reject.json", ".version", ".served-damaged")
SITE_URL = "https://openreview.net"   # pdf_url is the paper's public link, stable whatever API host served it


class MalformedPage(ValueError):
    """A page whose body stayed unreadable after retries."""


@dataclass
class IngestResult:
    venue_id: str
    api_version: int
    papers: int = 0
    reviews: int = 0
    reviews_ingested: int = 0      # every review met: reviews + review rejects
    rejects: int = 0
    pages_fetched: int = 0
    pages_cached: int = 0
    pages_rejected: int = 0
    pdfs: int = 0                  # PDFs on disk for the papers later stages read
    pdfs_needed: int = 0           # papers whose PDF later stages read (the benchmark sample by default)
    pdfs_skipped: int = 0          # active papers with a PDF that no stage reads: not fetched
    form: str = ""                 # the review form used: the venue table, or one line of the derived form
    histories_fetched: int = 0     # revision histories read from the API / the raw cache (tasks/stages/ingest/versions.py)
    histories_cached: int = 0
    reviews_edited: int = 0        # reviews whose rating, confidence or text changed after posting
    pdfs_revised: int = 0          # papers with more than one PDF version
    pdfs_hidden: int = 0           # v2 papers whose history is not public: latest PDF kept
    reviews_hidden: int = 0        # v2 reviews whose history is not public: final version kept
    pdf_texts: int | None = None   # None when the PDF step did not run
    rejects_by_rule: dict[str, int] = field(default_factory=dict)

    def summary(self) -> StageSummary:
        """Reviews fetched in, reviews written out; the venue's figures in the details."""
        return StageSummary(self.reviews_ingested, self.reviews, details={self.venue_id: asdict(self)})


def note_json(note: Any) -> dict[str, Any]:
    """A client Note as a JSON dict, without reviewer or author identity."""
    raw = {k: v for k, v in vars(note).items() if k not in IDENTITY_KEYS and v is not None}
    if isinstance(raw.get("content"), dict):
        raw["content"] = {k: v for k, v in raw["content"].items() if k not in PRIVATE_CONTENT}
    details = raw.get("details")
    if isinstance(details, dict):
        raw["details"] = {k: [_strip(r) for r in v] if isinstance(v, list) else v for k, v in details.items()}
    return raw


def _strip(reply: Any) -> Any:
    return {k: v for k, v in reply.items() if k not in IDENTITY_KEYS} if isinstance(reply, dict) else reply


def _page_problem(offset: int) -> Callable[[Any], str | None]:
    def problem(page: Any) -> str | None:
        if not isinstance(page, dict) or not isinstance(page.get("notes"), list):
            return "not a page of notes"
        if page.get("offset") != offset or not isinstance(page.get("count"), int | None):
            return "offset or count missing or wrong"
        if not all(isinstance(n, dict) for n in page["notes"]):
            return "a note that is not an object"
        return None
    return problem


def _fetch(client: Any, params: dict[str, Any], cfg: IngestConfig, with_count: bool) -> tuple[list[dict], int | None]:
    """One page through the client; a malformed body is retried with back-off, then MalformedPage."""
    problem: Exception | None = None
    for attempt in range(cfg.max_retries + 1):
        if attempt:
            time.sleep(min(cfg.max_backoff_seconds, cfg.backoff_seconds * 2 ** (attempt - 1)))
        try:
            if with_count:
                notes, count = client.get_notes(**params, with_count=True)
            else:
                notes, count = client.get_notes(**params), None
            return [note_json(n) for n in notes], count
        except (ValueError, KeyError, TypeError) as error:   # JSONDecodeError is a ValueError
            problem = error
            log.warning("malformed page %s (attempt %d): %s", params, attempt + 1, error)
    raise MalformedPage(f"{type(problem).__name__}: {problem}")


def page_path(folder: Path, invitation: str, limit: int, offset: int) -> Path:
    """Where the page of `invitation` at `offset` is cached."""
    return folder / f"{slug(invitation)}__{DETAILS}__limit{limit}" / f"offset_{offset:08d}.json"


@dataclass
class _Pager:
    """Pages of one invitation, read from the raw cache or fetched and cached."""

    client: Any
    cfg: IngestConfig
    folder: Path
    venue_id: str
    result: IngestResult
    rejects: list[dict[str, Any]]

    def pages(self, invitation: str) -> Iterator[list[dict[str, Any]]]:
        """The invitation's pages in order; a paced run shows them as progress with an ETA."""
        bars: list[Any] = []   # the bar, once the first page tells the count
        try:
            yield from self._pages(invitation, bars)
        finally:
            for bar in bars:
                bar.close()

    def _pages(self, invitation: str, bars: list[Any]) -> Iterator[list[dict[str, Any]]]:
        limit = self.cfg.page_size
        offset, step, count = 0, None, None
        while count is None or offset < count:
            path = page_path(self.folder, invitation, limit, offset)
            page = read_cached(path, self.folder, _page_problem(offset))
            if page is not None:
                self.result.pages_cached += 1
            else:
                params = {"invitation": invitation, "details": DETAILS, "limit": limit, "sort": SORT,
                          "offset": offset or None}
                try:
                    notes, total = _fetch(self.client, params, self.cfg, with_count=offset == 0)
                except MalformedPage as error:
                    self.result.pages_rejected += 1
                    self.rejects.append(reject("page", f"{invitation}@offset={offset}", None, self.venue_id,
                                               "malformed_page", str(error)))
                    if step is None:    # without the first page the size of the venue is unknown
                        raise SourceError(f"{self.venue_id}: the first page of {invitation} stayed malformed "
                                          f"after {self.cfg.max_retries + 1} attempts ({error})") from None
                    offset += step
                    continue
                page = {"invitation": invitation, "offset": offset, "limit": limit, "count": total, "notes": notes}
                write_bytes_atomic(path, json.dumps(page, ensure_ascii=False).encode("utf-8", "surrogatepass"))
                self.result.pages_fetched += 1
            if offset == 0:
                count = page["count"] if page["count"] is not None else float("inf")
                step = len(page["notes"]) or limit
                if count != float("inf"):
                    bars.append(progress(max(1, -(-int(count) // step)), f"pages of {invitation}", "page"))
            for bar in bars:
                bar.update(1)
            yield page["notes"]
            if not page["notes"]:
                return
            offset += step or limit


def _submission_invitations(client: Any, api_version: int, venue_id: str, folder: Path) -> list[str]:
    """v2: the submission invitation the venue group names (`submission_id`, else `submission_name`;
    cached); v1: blind, withdrawn and desk-rejected ones (`collect_venue` falls back to
    `<venue>/-/Submission` when a v1 venue has no blind submissions)."""
    if api_version == 1:
        return [f"{venue_id}/-/{name}" for name in ("Blind_Submission", "Withdrawn_Submission",
                                                     "Desk_Rejected_Submission")]
    content = _group_content(client, venue_id, folder)
    name = value(content, "submission_name")
    return [value(content, "submission_id") or f"{venue_id}/-/{name or 'Submission'}"]


def _group_content(client: Any, venue_id: str, folder: Path) -> dict[str, Any]:
    """The v2 venue group's settings that name its invitations and form fields (cached)."""
    path = folder / "group.json"
    content = read_cached(path, folder, lambda c: None if isinstance(c, dict) else "not a JSON object")
    if content is None:
        group = client.get_group(venue_id)
        content = {k: v for k, v in (group.content or {}).items()
                   if k.endswith(("_id", "_name")) or k in ("review_rating", "review_confidence")}
        folder.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(path, json.dumps(content).encode())
    return content


def _frame(rows: list[dict[str, Any]], schema: pl.Schema) -> pl.DataFrame:
    """Rows (dates as epoch milliseconds) as a frame of `schema`."""
    if not rows:
        return empty(schema)
    dates = [n for n, t in schema.items() if isinstance(t, pl.Datetime)]
    raw = pl.Schema({n: (pl.Int64 if n in dates else t) for n, t in schema.items()})
    frame = pl.DataFrame(rows, schema=raw)
    return conform(frame.with_columns(pl.from_epoch(pl.col(d), time_unit="ms").dt.replace_time_zone("UTC")
                                      for d in dates), schema)


def collect_venue(client: Any, venue_id: str, api_version: int, cfg: IngestConfig, folder: Path,
                  pdf_base: str, result: IngestResult, form: Mapping[str, str] | None = None
                  ) -> tuple[pl.DataFrame, pl.DataFrame, list[dict]]:
    """(papers, reviews, reject rows) of a venue, page by page, deduplicated; `form` is the venue
    table's field mapping (tasks/stages/ingest/forms.py)."""
    rejects: list[dict[str, Any]] = []
    pager = _Pager(client, cfg, folder, venue_id, result, rejects)
    seen_papers: set[str] = set()
    seen_reviews: set[str] = set()
    papers, reviews = [], []
    invitations = _submission_invitations(client, api_version, venue_id, folder)
    served: dict[str, int] = {}
    if api_version == 1:   # a v1 venue without blind copies lists its papers under Submission only
        invitations.append(f"{venue_id}/-/Submission")
    for invitation in invitations:
        fallback = invitation == f"{venue_id}/-/Submission" and api_version == 1
        if fallback and served.get(f"{venue_id}/-/Blind_Submission"):
            continue
        served[invitation] = 0
        for notes in pager.pages(invitation):
            served[invitation] += len(notes)
            paper_rows, review_rows = [], []
            for note in notes:
                if fallback and note.get("id") in seen_papers:   # Submission lists the withdrawn ones too
                    continue
                found = normalise_submission(note, venue_id, api_version, pdf_base, seen_reviews, form)
                result.reviews_ingested += found.reviews_seen
                rejects.extend(found.rejects)
                review_rows.extend(found.reviews)
                if found.paper is None:
                    continue
                if found.paper["paper_id"] in seen_papers:
                    rejects.append(reject("paper", found.paper["paper_id"], found.paper["paper_id"], venue_id,
                                          "duplicate_paper", f"served again by {invitation}"))
                    continue
                seen_papers.add(found.paper["paper_id"])
                paper_rows.append(found.paper)
            papers.append(_frame(paper_rows, PAPERS))
            reviews.append(_frame(review_rows, REVIEWS))
    paper_frame = pl.concat([empty(PAPERS), *papers]).sort("number", "paper_id", nulls_last=True)
    review_frame = pl.concat([empty(REVIEWS), *reviews]).sort("paper_id", "review_id")
    return paper_frame, review_frame, rejects


def download_pdfs(client: Any, paper_ids: list[str], pdf_dir: Path, cfg: IngestConfig, venue_id: str,
                  sources: Mapping[str, tuple[str, dict[str, str], str | None]] | None = None
                  ) -> tuple[list[str], list[dict[str, Any]]]:
    """Fetch each paper's PDF into `pdf_dir/<paper_id>.pdf` (cached); (ids on disk, reject rows).

    Each file is named by `id_path` (an id that is not a safe file name gets its slug and a hash; a
    path that would leave `pdf_dir` is a `rejects` row, rule `unsafe_path`).
    Streams through the client's own session (the client's `get_pdf` would read the whole body
    first): a declared or actual size above `pdf_max_bytes` stops the download. Permanent
    failures (too large, not found) are remembered in `<paper_id>.reject.json`, so reruns skip them.
    `sources` maps a paper to (URL, query, version id) of the PDF version to fetch (default: the
    latest, `/pdf?id=`, version None); an earlier version on disk is noted in `<paper_id>.version`,
    so a file of another version is fetched again. The download is a queue that survives restarts:
    a file is written whole (temp file + rename) or not at all, and a file on disk is done unless it
    is damaged (empty, not a PDF, cut short) on disk: then it is quarantined and fetched again. A PDF
    the server itself sends damaged is noted (`<paper_id>.served-damaged`) and kept: the text step
    rejects it as `corrupt_pdf` without fetching it on every rerun.
    """
    pdf_dir.mkdir(parents=True, exist_ok=True)
    sources = sources or {}

    def one(paper_id: str) -> tuple[str | None, dict[str, Any] | None]:
        try:   # the server's id names the files: a safe name always (tasks/core/layout.py `id_path`)
            path, marker, noted, served = (id_path(pdf_dir, paper_id, s) for s in PDF_FILES)
        except UnsafePath as error:
            return None, reject("pdf", paper_id, paper_id, venue_id, "unsafe_path", str(error))
        url, params, version = sources.get(paper_id) or (client.pdf_url, {"id": paper_id}, None)
        if path.exists() and (noted.read_text() == version if noted.exists() else version is None):
            damage = pdf_damage(path)
            if damage is None or (served.exists() and served.read_text() == str(path.stat().st_size)):
                return paper_id, None
            quarantine(path, pdf_dir, damage)   # damaged on disk: fetched again below, like a damaged page
            noted.unlink(missing_ok=True)
        remembered = read_cached(marker, pdf_dir, lambda c: None if isinstance(c, dict) else "not a JSON object")
        if remembered is not None:
            return None, remembered
        try:
            with client.session.get(url, params=params, headers=client.headers, stream=True) as response:
                if response.status_code == 404:
                    return None, _remember(marker, reject("pdf", paper_id, paper_id, venue_id, "pdf_not_found",
                                                          "the API has no PDF for this paper"))
                response.raise_for_status()
                declared = int(response.headers.get("Content-Length") or 0)
                if declared > cfg.pdf_max_bytes:
                    return None, _remember(marker, reject("pdf", paper_id, paper_id, venue_id, "pdf_too_large",
                                                          f"declared {declared} bytes > {cfg.pdf_max_bytes}"))
                chunks, size = [], 0
                deadline = time.monotonic() + cfg.request_total_seconds
                for chunk in response.iter_content(1 << 16):
                    if time.monotonic() > deadline:
                        return None, reject("pdf", paper_id, paper_id, venue_id, "pdf_download_failed",
                                            f"the download took more than {cfg.request_total_seconds:g} s "
                                            "([ingest] request_total_seconds)")
                    size += len(chunk)
                    if size > cfg.pdf_max_bytes:
                        return None, _remember(marker, reject("pdf", paper_id, paper_id, venue_id, "pdf_too_large",
                                                              f"body exceeds {cfg.pdf_max_bytes} bytes"))
                    chunks.append(chunk)
            body = b"".join(chunks)
            write_bytes_atomic(path, body)   # then its notes: a kill in between costs a refetch, no more
            if pdf_damage(path):
                write_bytes_atomic(served, str(len(body)).encode())
            else:
                served.unlink(missing_ok=True)
            if version is not None:
                write_bytes_atomic(noted, version.encode())
            else:
                noted.unlink(missing_ok=True)
            return paper_id, None
        except requests.RequestException as error:
            return None, reject("pdf", paper_id, paper_id, venue_id, "pdf_download_failed", repr(error))

    results = []
    with ThreadPoolExecutor(cfg.pdf_workers) as pool, progress(len(paper_ids), f"PDFs of {venue_id}", "pdf") as bar:
        for found in pool.map(one, paper_ids):
            results.append(found)
            bar.update(1)
    return [p for p, _ in results if p], [r for _, r in results if r]


def pdf_damage(path: Path) -> str | None:
    """Why a cached PDF is unusable (empty, not a PDF, cut short: no %%EOF near its end), else None.
    A cheap look at its first and last bytes; a whole but unparseable PDF is the parser's to report."""
    try:
        size = path.stat().st_size
        with path.open("rb") as file:
            head = file.read(5)
            file.seek(max(0, size - 2048))
            tail = file.read()
    except OSError as error:
        return f"unreadable: {error.strerror}"
    if not size:
        return "empty file"
    if head != b"%PDF-":
        return f"not a PDF (starts with {head!r})"
    if b"%%EOF" not in tail:
        return "truncated (no %%EOF at the end)"
    return None


def _remember(marker: Path, row: dict[str, Any]) -> dict[str, Any]:
    write_bytes_atomic(marker, json.dumps(row).encode())
    return row


def _extract_texts(pdf_dir: Path, ids: list[str], cfg: IngestConfig, venue_id: str
                   ) -> tuple[pl.DataFrame, pl.DataFrame] | None:
    try:
        from tasks.stages.ingest.pdf import extract_pdfs
    except ImportError:
        log.warning("tasks.stages.ingest.pdf is not available; PDF text extraction skipped")
        return None
    from tasks.stages.ingest.pdf import PdfLimits

    return extract_pdfs(pdf_dir, ids, max_bytes=cfg.pdf_max_bytes, venue_id=venue_id,
                        strip_hidden=cfg.strip_hidden_text,
                        limits=PdfLimits(cfg.pdf_memory_mb, cfg.pdf_seconds, cfg.pdf_max_pages))


def ingest_venue(venue_id: str, cfg: Config, out_dir: Path, baseurl: str | None = None,
                 select: PaperSelector | None = None, source: str | None = None) -> IngestResult:
    """Ingest `venue_id` into `out_dir`; see the module docstring for the contract. `select` names
    the papers whose PDFs later stages read (default: every active paper); `source` is the key of
    the raw cache (default: the API the pages come from, `url_source`).

    Under the lock of `out_dir`: a second ingest of the same venue waits, then reads the cache.
    """
    with locked(out_dir):
        return _ingest_venue(venue_id, cfg, out_dir, baseurl, select, source)


def venue_form(cfg: Config, venue_id: str, client: Any, api_version: int, folder: Path) -> ReviewForm:
    """The venue's `[venues."<id>"]` table when pipelines.toml has one (checked against the venue's
    own labels: shipped ones, and its cached invitation), else its own review form."""
    if venue_id in cfg.venues:
        return checked_table_form(venue_id, cfg.venues[venue_id], folder, cfg.curate.common_scale,
                                  cfg.curate.confidence_range)
    group = _group_content(client, venue_id, folder) if api_version == 2 else None
    return read_form(client, api_version, venue_id, group, folder, cfg.curate.common_scale,
                     cfg.curate.confidence_range)


def _ingest_venue(venue_id: str, cfg: Config, out_dir: Path, baseurl: str | None,
                  select: PaperSelector | None, source: str | None) -> IngestResult:
    api_version = cfg.venue(venue_id).api_version(venue_id)
    settings = cfg.ingest
    throttle = Throttle.from_config(settings) if baseurl is None else None   # the real API only
    baseurl = baseurl or (settings.api_v1_url if api_version == 1 else settings.api_v2_url)
    client = make_client(api_version, baseurl, settings, throttle)
    result = IngestResult(venue_id, api_version)
    key = source or url_source(baseurl)
    folder = raw_dir(cfg, venue_id, api_version, key)
    identify = source is None and not identified_by_address(baseurl)   # tasks/stages/ingest/source_identity.py
    if identify and not same_source(client, api_version, venue_id, folder, settings, baseurl):
        folder = raw_dir(cfg, venue_id, api_version, key)
    form = venue_form(cfg, venue_id, client, api_version, folder)
    venue_cfg = cfg.venues.get(venue_id) or form.venue_config(api_version)
    result.form = form.describe()
    papers, reviews, reject_rows = collect_venue(client, venue_id, api_version, settings, folder, SITE_URL, result,
                                                 venue_cfg.form)
    if identify:
        remember_source(client, api_version, venue_id, folder, settings, baseurl)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_form(form, out_dir)
    write_parquet(pl.DataFrame([form.row(api_version)]), out_dir / "venue_forms.parquet")
    frames = [pl.DataFrame(reject_rows, schema=REJECTS) if reject_rows else empty(REJECTS)]
    hidden = not settings.probe_hidden_histories and history_hidden(venue_id)   # facts: no request can help
    stats = VersionStats()
    if settings.versions:
        reviews = review_versions(client, api_version, venue_id, papers, reviews, folder, settings.pdf_workers,
                                  venue_cfg.form, stats, hidden)
    else:
        reviews = without_history(reviews)
    active = papers.filter((pl.col("status") == "active") & pl.col("pdf_url").is_not_null())["paper_id"].to_list()
    wanted = active
    if select is not None and settings.pdf_scope != "all":
        chosen = set(select(papers, reviews, venue_cfg))
        wanted = [p for p in active if p in chosen]
    result.pdfs_needed, result.pdfs_skipped = (len(wanted), len(active) - len(wanted)) if settings.pdf else (0, 0)
    sources = {}
    if settings.versions and settings.pdf:
        papers, choices = pdf_versions(client, api_version, venue_id, papers, reviews, wanted, folder,
                                       settings.pdf_workers, stats, hidden)
        # a PDF already on disk is the latest unless its `.version` says otherwise (tasks/stages/ingest/versions.py)
        sources = {pid: (*download_source(client, api_version, pid, c), None if c.latest else c.version)
                   for pid, c in choices.items()}
    result.histories_fetched, result.histories_cached = stats.histories_fetched, stats.histories_cached
    result.reviews_edited, result.pdfs_revised = stats.reviews_edited, stats.pdfs_revised
    result.pdfs_hidden, result.reviews_hidden = stats.pdfs_hidden, stats.reviews_hidden
    if settings.pdf:
        log.info("%s: %d PDFs needed (%d active papers no stage reads are skipped)%s", venue_id, len(wanted),
                 result.pdfs_skipped, pdf_eta(len(wanted), settings, throttle is not None))
        on_disk, pdf_rejects = download_pdfs(client, wanted, out_dir / "pdfs", settings, venue_id, sources)
        result.pdfs = len(on_disk)
        frames.append(pl.DataFrame(pdf_rejects, schema=REJECTS) if pdf_rejects else empty(REJECTS))
        extracted = _extract_texts(out_dir / "pdfs", sorted(on_disk), settings, venue_id)
        if extracted is not None:
            texts, text_rejects = extracted
            frames.append(conform(text_rejects, REJECTS))
            write_parquet(texts.sort("paper_id"), out_dir / "pdf_texts.parquet")
            from tasks.stages.ingest.pdf import hidden_spans  # importable: _extract_texts ran it

            write_parquet(hidden_spans(texts), out_dir / "paper_integrity.parquet")
            result.pdf_texts = texts.height
    rejects = pl.concat(frames).sort("entity", "rule", "entity_id", nulls_last=True)
    review_rejects = rejects.filter(pl.col("entity") == "review").height
    if result.reviews_ingested != reviews.height + review_rejects:
        raise RuntimeError(f"{venue_id}: {result.reviews_ingested} reviews ingested but {reviews.height} kept "
                           f"+ {review_rejects} rejected")
    write_parquet(papers, out_dir / "papers.parquet")
    write_parquet(reviews, out_dir / "reviews.parquet")
    write_parquet(rejects, out_dir / "rejects.parquet")
    result.papers, result.reviews, result.rejects = papers.height, reviews.height, rejects.height
    result.rejects_by_rule = dict(sorted(rejects.group_by("rule").len().iter_rows()))
    log.info("ingested %s: %s", venue_id, result)
    return result


def same_source(client: Any, api_version: int, venue_id: str, folder: Path, settings: IngestConfig,
                baseurl: str) -> bool:
    """Whether the cache in `folder` was written by the server now at `baseurl`, asked with one
    request (tasks/stages/ingest/source_identity.py); when not, the cache is moved aside. A cache a
    crashed run left has no fingerprint yet: its first page stands for it."""
    stored = stored_fingerprint(folder)
    if stored is None and not holds_cache(folder):
        return True
    invitation = _submission_invitations(client, api_version, venue_id, folder)[0]
    stored = stored or _cached_fingerprint(folder, invitation, settings)
    if stored is None:
        why = "cannot be matched to its raw cache (it holds neither a fingerprint nor a first page)"
    else:
        try:
            notes, count = _fetch(client, {"invitation": invitation, "limit": settings.page_size, "sort": SORT},
                                  settings, with_count=True)
            served = fingerprint(invitation, count, notes)
        except (openreview.OpenReviewException, MalformedPage) as error:
            served = f"unanswered: {error}"
        if served == stored:
            return True
        why = "serves other content than its raw cache holds"
    move_aside(folder, venue_id, baseurl, why)
    return False


def _cached_fingerprint(folder: Path, invitation: str, settings: IngestConfig) -> str | None:
    """The fingerprint of the cached first page of `invitation`, or None when it is not cached."""
    page = read_cached(page_path(folder, invitation, settings.page_size, 0), folder, _page_problem(0))
    return None if page is None else fingerprint(invitation, page["count"], page["notes"])


def remember_source(client: Any, api_version: int, venue_id: str, folder: Path, settings: IngestConfig,
                    baseurl: str) -> None:
    """Keep the fingerprint of what the server served with its cache: from the cached first page of
    the venue's first submission listing (no request)."""
    served = _cached_fingerprint(folder, _submission_invitations(client, api_version, venue_id, folder)[0], settings)
    if served is not None:
        store_fingerprint(folder, baseurl, served)


def pdf_eta(count: int, settings: IngestConfig, paced: bool) -> str:
    """", about H h at the configured PDF rate" for `count` PDFs (empty when unpaced)."""
    import os

    rate = settings.logged_in_pdfs_per_hour if any(os.environ.get(k) for k in (
        "OPENREVIEW_TOKEN", "OPENREVIEW_USERNAME")) else settings.pdfs_per_hour
    if not paced or not rate or not count:
        return ""
    return f", about {count / rate:.1f} h at {rate:g} PDFs an hour"


# A retry after a 429 / 5xx / timeout resumes from the cached pages.


def lookup_form(cfg: Config, venue_id: str, baseurl: str | None = None, quick: bool = False) -> ReviewForm:
    """The form ingest would use for `venue_id` now: its venue table, else read from the venue
    (cached under data/raw like the pages). `quick`: no retries and a short timeout (a plan)."""
    if venue_id in cfg.venues:
        return table_form(venue_id, cfg.venues[venue_id])
    api_version = cfg.venue(venue_id).api_version(venue_id)
    settings = cfg.ingest.model_copy(update={"max_retries": 0, "timeout_seconds": 10.0}) if quick else cfg.ingest
    base = baseurl or (settings.api_v1_url if api_version == 1 else settings.api_v2_url)
    client = make_client(api_version, base, settings, Throttle.from_config(settings) if baseurl is None else None)
    return venue_form(cfg, venue_id, client, api_version, raw_dir(cfg, venue_id, api_version, url_source(base)))
