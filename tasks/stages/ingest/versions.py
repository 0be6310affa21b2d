"""Revision histories: the PDF the reviewers saw, and each review's first and final versions.

A submission's PDF on OpenReview is its latest revision, often the camera-ready that answers the
reviews, and reviews are edited after the rebuttal. Ingest therefore reads each note's history
through the real client: API v2 `get_note_edits(note_id=...)` (an edit may carry only the fields it
changed, so versions are the running merge of the edits' note content), API v1
`get_references(referent=..., original=True)` (whole-content snapshots, the blind note's original
included). Each history is cached under `data/raw/<source>/<venue>/v<N>/history/<note id>.json` like the
pages (temp file + rename; an unreadable entry is quarantined and fetched again).

- Paper: the PDF versions are the distinct `pdf` values in that history. The one kept is the last
  version dated on or before the paper's first review (the version its reviewers saw; an
  abstract-only registration or a placeholder uploaded before the deadline is passed over), or
  the first version when the paper has no review. `pdf_version` (the edit / reference id),
  `pdf_date` and `pdf_versions` (how many there are) are recorded, and `pdf_url` names that version.
- Review: the first version is the first one in its history, the final one the note as it stands.
  The main columns (rating, confidence, the text sections, review_text) hold the first version;
  `rating_final`, `confidence_final`, `review_text_final` (and the raw form strings) the final
  one; `edited_after_rebuttal` says whether rating, confidence or text changed between them, and
  `final_at` is when the review was last modified. A review never modified after it was posted
  (modification date = creation date) needs no request. Without a history (versions off, or the
  API shows none) both are the note as served and the flag is null (unknown).

Hidden histories (API v2): OpenReview shows outsiders only part of a v2 venue's edits (since late
2025 the Submission / Revision edits and the review edits are readable by the venue's chairs and
authors only; an accepted paper shows its Camera_Ready_Revision edits), and a superseded PDF is
not served. A v2 history is taken as readable when it holds the note's creation (an edit dated
no later than the note's creation date, `CREATION_SLACK_MS` allowed); otherwise nothing is
guessed from the part that shows: the paper keeps its latest PDF with `pdf_version` =
"latest, history not public" (`HIDDEN_PDF`), and the review keeps the note as served, with
`review_history` = "final, history not public" and `edited_after_rebuttal` null. `review_history`
says for every review which case holds: "first and final" (history read), "one version" (never
modified after posting), "final, history not public", or null (histories not read).

Limit: the history does not say when reviews were released to the authors, so an edit made before
the release (e.g. a typo fixed on the day) also counts as an edit; `final_at` and the review's
`created_at` let a user tell them apart.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openreview
import polars as pl

from tasks.core.frames import FINAL_COLUMNS, SECTION_COLUMNS
from tasks.core.layout import id_path
from tasks.core.locks import write_bytes_atomic
from tasks.core.progress import progress
from tasks.core.schema import HIDDEN_PDF, PAPERS, REVIEW_HIDDEN, REVIEW_ONE, REVIEW_READ, REVIEWS, conform
from tasks.stages.ingest.forms import normalise_review, value
from tasks.stages.ingest.raw_cache import read_cached

log = logging.getLogger(__name__)
PRIVATE_CONTENT = ("authors", "authorids")
CREATION_SLACK_MS = 60_000


@dataclass
class PdfChoice:
    """The PDF version kept for a paper."""

    version: str            # edit id (v2) / reference id (v1)
    date: int | None        # epoch ms
    versions: int           # distinct PDF versions in the history
    latest: bool            # the version the plain /pdf?id= endpoint serves


@dataclass
class VersionStats:
    """What reading the histories of one venue did (counted in the calling thread)."""

    histories_fetched: int = 0
    histories_cached: int = 0
    reviews_edited: int = 0
    pdfs_revised: int = 0
    pdfs_hidden: int = 0            # papers whose v2 history is not public (latest PDF kept)
    reviews_hidden: int = 0         # reviews whose v2 history is not public (final version kept)


def _history_problem(content: Any) -> str | None:
    if not isinstance(content, dict) or not isinstance(content.get("versions"), list):
        return "not a history"
    if not all(isinstance(v, dict) and "id" in v for v in content["versions"]):
        return "a version without an id"
    return None


def _version(raw: Any, api_version: int) -> dict[str, Any]:
    """One edit (v2) or reference (v1) as a JSON dict, without identity (signatures, tauthor)."""
    if api_version == 2:
        note = getattr(raw, "note", None)
        content = getattr(note, "content", None) if note is not None else None
        invitation = raw.invitation if isinstance(raw.invitation, str) else getattr(raw.invitation, "id", None)
    else:
        content, invitation = raw.content, raw.invitation
    if isinstance(content, dict):
        content = {k: v for k, v in content.items() if k not in PRIVATE_CONTENT}
    return {"id": raw.id, "invitation": invitation, "tcdate": raw.tcdate, "cdate": raw.cdate,
            "content": content or None}


def fetch_history(client: Any, api_version: int, note_id: str, folder: Path) -> tuple[list[dict[str, Any]], bool]:
    """(the versions of a note, oldest first; read from the raw cache?), from the cache or the
    API (then cached).

    A note whose history the API refuses (403 / 404) has an empty history (cached too: delete
    `history/` to ask again, e.g. once logged in); rate limits and server errors surface after the
    client's retries, so a rerun resumes from the cache.
    """

    path = id_path(folder / "history", note_id, ".json")   # the server's id, as a safe file name
    cached = read_cached(path, folder, _history_problem)
    if cached is not None:
        return cached["versions"], True
    try:
        if api_version == 2:
            raw = client.get_note_edits(note_id=note_id)
        else:
            raw = client.get_references(referent=note_id, original=True)
        versions = [_version(r, api_version) for r in raw]
    except openreview.OpenReviewException as error:
        status = error.args[0].get("status") if error.args and isinstance(error.args[0], dict) else None
        if status not in (403, 404):
            raise
        log.warning("no revision history for %s (%s)", note_id, status)
        versions = []
    versions.sort(key=lambda v: (v.get("tcdate") or v.get("cdate") or 0, v["id"]))
    write_bytes_atomic(path, json.dumps({"note_id": note_id, "versions": versions}, ensure_ascii=False)
                 .encode("utf-8", "surrogatepass"))
    return versions, False


def readable(versions: list[dict[str, Any]], created: int | None) -> bool:
    """Does a v2 history hold the note's creation (see the module docstring)?"""
    dates = [v.get("tcdate") or v.get("cdate") for v in versions]
    dates = [d for d in dates if d is not None]
    if not dates:
        return False
    return created is None or min(dates) <= created + CREATION_SLACK_MS


def states(versions: list[dict[str, Any]]) -> list[tuple[str, int | None, dict[str, Any]]]:
    """(version id, date, whole content) after each version that changed the content, oldest first."""
    out: list[tuple[str, int | None, dict[str, Any]]] = []
    content: dict[str, Any] = {}
    for version in versions:
        if not version.get("content"):
            continue
        merged = {**content, **version["content"]}
        if merged != content:
            content = merged
            out.append((version["id"], version.get("tcdate") or version.get("cdate"), content))
    return out


def choose_pdf(versions: list[dict[str, Any]], first_review: int | None) -> PdfChoice | None:
    """The PDF version the reviewers saw (see the module docstring); None without a PDF in the history."""
    pdfs: list[tuple[str, int | None]] = []
    last = None
    for ident, date, content in states(versions):
        pdf = value(content, "pdf")
        if pdf and pdf != last:
            pdfs.append((ident, date))
            last = pdf
    if not pdfs:
        return None
    index = 0
    if first_review is not None:
        before = [i for i, (_, date) in enumerate(pdfs) if date is not None and date <= first_review]
        index = before[-1] if before else 0
    ident, date = pdfs[index]
    return PdfChoice(ident, date, len(pdfs), index == len(pdfs) - 1)


def review_row(final: dict[str, Any], versions: list[dict[str, Any]], venue_id: str,
               form: Mapping[str, str] | None, stats: VersionStats | None = None) -> dict[str, Any]:
    """The REVIEWS row of a review whose final row is `final`: the first version in the main
    columns, the final one in the *_final columns."""
    row = {**final, **{f"{c}_final": final.get(c) for c in FINAL_COLUMNS}, "edited_after_rebuttal": None,
           "review_history": REVIEW_READ}
    found = states(versions)
    if not found:
        return row
    _, date, content = found[0]
    first, problem = normalise_review({"id": final["review_id"], "forum": final["paper_id"], "cdate": date,
                                       "content": content}, venue_id, form)
    if problem is not None:   # keep the final version; say nothing about edits
        log.warning("first version of review %s unusable (%s); the final one is kept", final["review_id"], problem)
        return row
    row.update({c: first.get(c) for c in (*FINAL_COLUMNS, *SECTION_COLUMNS)})
    row["edited_after_rebuttal"] = any(first.get(c) != final.get(c) for c in ("rating", "confidence", "review_text"))
    if row["edited_after_rebuttal"] and stats:
        stats.reviews_edited += 1
    return row


def _modified(row: dict[str, Any]) -> bool:
    created, final_at = row.get("created_at"), row.get("final_at")
    return created is None or final_at is None or final_at > created


def apply_versions(client: Any, api_version: int, venue_id: str, papers: pl.DataFrame, reviews: pl.DataFrame,
                   folder: Path, workers: int, form: Mapping[str, str] | None, want_pdfs: bool,
                   known_hidden: bool = False
                   ) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, PdfChoice], VersionStats]:
    """(papers, reviews, PDF choice per paper, stats) with the histories of active papers (when
    `want_pdfs`) and of their reviews modified after posting applied (PAPERS / REVIEWS frames).

    `known_hidden` (a v2 venue whose facts say outsiders cannot read its edit history): no history
    is requested, and every note that would have needed one is recorded as hidden."""
    stats = VersionStats()
    reviews = review_versions(client, api_version, venue_id, papers, reviews, folder, workers, form, stats,
                              known_hidden)
    choices: dict[str, PdfChoice] = {}
    if want_pdfs:
        wanted = papers.filter((pl.col("status") == "active") & pl.col("pdf_url").is_not_null())["paper_id"]
        papers, choices = pdf_versions(client, api_version, venue_id, papers, reviews, wanted.to_list(), folder,
                                       workers, stats, known_hidden)
    return papers, reviews, choices, stats


def _histories(client: Any, api_version: int, venue_id: str, ids: list[str], folder: Path, workers: int,
               stats: VersionStats, known_hidden: bool) -> dict[str, list[dict[str, Any]]]:
    """The histories of `ids` (cached under `folder`); none requested when `known_hidden` (v2)."""
    if known_hidden and api_version == 2:
        log.info("%s: edit history not public (venue facts); %d histories not requested", venue_id, len(ids))
        return dict.fromkeys(ids, [])
    histories: dict[str, list[dict[str, Any]]] = {}
    with ThreadPoolExecutor(workers) as pool, progress(len(ids), f"histories of {venue_id}", "note") as bar:
        for note_id, (versions, cached) in zip(ids, pool.map(
                lambda note_id: fetch_history(client, api_version, note_id, folder), ids), strict=True):
            histories[note_id] = versions
            stats.histories_cached += cached
            stats.histories_fetched += not cached
            bar.update(1)
    return histories


def _hidden(api_version: int, histories: dict[str, list[dict[str, Any]]], created: dict[str, int | None]) -> set[str]:
    """The notes whose (v2) history an outsider cannot read: recorded, never guessed from the rest."""
    if api_version != 2:
        return set()
    return {i for i, versions in histories.items() if not readable(versions, created.get(i))}


def review_versions(client: Any, api_version: int, venue_id: str, papers: pl.DataFrame, reviews: pl.DataFrame,
                    folder: Path, workers: int, form: Mapping[str, str] | None, stats: VersionStats,
                    known_hidden: bool = False) -> pl.DataFrame:
    """The reviews of active papers with their first and final versions (one history request per
    review modified after posting); what curation needs, so it runs before the PDFs."""
    active_ids = set(papers.filter(pl.col("status") == "active")["paper_id"].to_list())
    rows = [{**r, "created_at": _ms(r.get("created_at")), "final_at": _ms(r.get("final_at"))}
            for r in reviews.to_dicts()]
    ids = [r["review_id"] for r in rows if r["paper_id"] in active_ids and _modified(r)]
    histories = _histories(client, api_version, venue_id, ids, folder, workers, stats, known_hidden)
    hidden = _hidden(api_version, histories, {r["review_id"]: r["created_at"] for r in rows})
    out_rows = []
    for row in rows:
        final = {**row, **{f"{c}_final": row.get(c) for c in FINAL_COLUMNS}}
        if row["review_id"] in hidden:
            out_rows.append({**final, "edited_after_rebuttal": None, "review_history": REVIEW_HIDDEN})
            stats.reviews_hidden += 1
        elif row["review_id"] in histories:
            out_rows.append(review_row(row, histories[row["review_id"]], venue_id, form, stats))
        else:   # never modified after posting (active paper): one version; other papers: not read
            active_paper = row["paper_id"] in active_ids
            out_rows.append({**final, "edited_after_rebuttal": False if active_paper else None,
                             "review_history": REVIEW_ONE if active_paper else None})
    return conform(out_rows_frame(out_rows, reviews.schema), REVIEWS)


def pdf_versions(client: Any, api_version: int, venue_id: str, papers: pl.DataFrame, reviews: pl.DataFrame,
                 paper_ids: list[str], folder: Path, workers: int, stats: VersionStats, known_hidden: bool = False
                 ) -> tuple[pl.DataFrame, dict[str, PdfChoice]]:
    """(papers, PDF choice per paper) for `paper_ids` (one history request each): the version the
    reviewers saw. Papers outside `paper_ids` keep their PDF columns empty."""
    histories = _histories(client, api_version, venue_id, paper_ids, folder, workers, stats, known_hidden)
    created = {p: _ms(c) for p, c in zip(papers["paper_id"], papers["created_at"], strict=True)}
    hidden = _hidden(api_version, histories, created)
    first_review: dict[str, int] = {}
    for paper_id, posted in zip(reviews["paper_id"], reviews["created_at"], strict=True):
        if posted is not None:
            stamp = _ms(posted)
            first_review[paper_id] = min(first_review.get(paper_id, stamp), stamp)
    choices = {}
    hidden_papers = [p for p in paper_ids if p in hidden]
    stats.pdfs_hidden = len(hidden_papers)
    for paper_id in paper_ids:
        if paper_id in hidden:
            continue
        choice = choose_pdf(histories[paper_id], first_review.get(paper_id))
        if choice is not None:
            choices[paper_id] = choice
            stats.pdfs_revised += choice.versions > 1

    def per_paper(values: dict[str, Any], dtype: pl.DataType, default: Any = None) -> pl.Expr:
        return pl.col("paper_id").replace_strict(values, default=default, return_dtype=dtype)

    papers = papers.with_columns(
        pdf_version=per_paper({**{k: c.version for k, c in choices.items()}, **dict.fromkeys(hidden_papers, HIDDEN_PDF)},
                              pl.String),
        pdf_date=pl.from_epoch(per_paper({k: c.date for k, c in choices.items()}, pl.Int64), time_unit="ms")
        .dt.replace_time_zone("UTC"),
        pdf_versions=per_paper({k: c.versions for k, c in choices.items()}, pl.Int32),
        pdf_url=per_paper({k: revision_url(api_version, c.version) for k, c in choices.items() if not c.latest},
                          pl.String, default=pl.col("pdf_url")),
    )
    return conform(papers, PAPERS), choices


def without_history(reviews: pl.DataFrame) -> pl.DataFrame:
    """Reviews whose history was not read: the final columns are the note as served, the flag null."""
    return reviews.with_columns(*(pl.col(c).alias(f"{c}_final") for c in FINAL_COLUMNS),
                                edited_after_rebuttal=pl.lit(None, pl.Boolean),
                                review_history=pl.lit(None, pl.String))


def revision_url(api_version: int, version: str, base: str = "https://openreview.net") -> str:
    """The public link of one PDF version."""
    if api_version == 2:
        return f"{base}/notes/edits/attachment?id={version}&name=pdf"
    return f"{base}/references/pdf?id={version}"


def download_source(client: Any, api_version: int, paper_id: str, choice: PdfChoice | None
                    ) -> tuple[str, dict[str, str]]:
    """(URL, query) that downloads the chosen PDF version through the client's host."""
    if choice is None or choice.latest:
        return client.pdf_url, {"id": paper_id}
    if api_version == 2:
        return client.note_edits_url + "/attachment", {"id": choice.version, "name": "pdf"}
    return client.pdf_revisions_url, {"id": choice.version}


def _ms(moment: Any) -> int | None:
    if moment is None:
        return None
    return int(moment.timestamp() * 1000)


def out_rows_frame(rows: list[dict[str, Any]], schema: pl.Schema) -> pl.DataFrame:
    """Rows with dates as epoch ms back into a frame of `schema`."""
    if not rows:
        return pl.DataFrame(schema=schema)
    dates = [n for n, t in schema.items() if isinstance(t, pl.Datetime)]
    raw = pl.Schema({n: (pl.Int64 if n in dates else t) for n, t in schema.items()})
    frame = pl.DataFrame(rows, schema=raw)
    return frame.with_columns(pl.from_epoch(pl.col(d), time_unit="ms").dt.replace_time_zone("UTC") for d in dates)
