"""`[ingest]` and `[venues.<id>]`: how ingest talks to OpenReview, and what each venue needs said about
it; `[pipelines.<name>.synthetic]`: the generated venue a synthetic pipeline serves.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from tasks.core.config_base import Frozen, Seed


class IngestConfig(Frozen):
    api_v1_url: str = "https://api.openreview.net"
    api_v2_url: str = "https://api2.openreview.net"
    page_size: int = Field(1000, ge=1, le=1000)
    max_retries: int = Field(6, ge=0, le=100)
    backoff_seconds: float = Field(1.0, ge=0, le=3600)
    max_backoff_seconds: float = Field(60.0, ge=0, le=86400)
    timeout_seconds: float = Field(60.0, gt=0, le=86400)
    # the longest one whole request may take, its answer read in full (a PDF download too):
    # timeout_seconds bounds each read only, and a server sending a byte at a time never trips it
    request_total_seconds: float = Field(600.0, gt=0, le=7 * 86400)
    pdf: bool = True
    pdf_max_bytes: int = Field(50 * 1024 * 1024, gt=0, le=2 * 1024**3)
    pdf_workers: int = Field(4, ge=1, le=256)
    # each PDF's text is read in a child process with these limits; a PDF over one is rejected
    # (pdf_over_limit) and the run goes on
    pdf_memory_mb: int = Field(2048, ge=256, le=1024 * 1024)
    pdf_seconds: float = Field(120.0, gt=0, le=86400)
    pdf_max_pages: int = Field(2000, ge=1, le=1_000_000)
    # which papers' PDFs (and PDF histories) ingest fetches: "sample" (the benchmark sample the
    # curate rules draw, what later stages read), "curated" (every paper curation keeps) or "all"
    pdf_scope: Literal["sample", "curated", "all"] = "sample"
    # text a reader cannot see (white, tiny, invisible, off the page) is listed in paper_integrity
    # and left out of the paper text candidates and judges read; false keeps it in the text
    strip_hidden_text: bool = True
    # pacing of the real API (a local / synthetic server is not paced); 0: no limit
    requests_per_minute: float = Field(0, ge=0)             # guests
    pdfs_per_hour: float = Field(0, ge=0)                   # guests
    logged_in_requests_per_minute: float = Field(0, ge=0)   # when OPENREVIEW_TOKEN or _USERNAME is set
    logged_in_pdfs_per_hour: float = Field(0, ge=0)
    edits_per_minute: float = Field(0, ge=0)   # revision histories (/notes/edits, /references), on top
    max_rate_wait_seconds: float = Field(3900, ge=0, le=7 * 86400)   # longest wait for a 429's reset time, else it surfaces
    # revision histories (tasks/stages/ingest/versions.py): the PDF the reviewers saw, first and final reviews
    versions: bool = True
    # false: a venue whose facts (tasks/core/venue_families.toml) say its edit history is hidden is not
    # asked for it (thousands of paced requests that would return nothing); true: ask anyway
    probe_hidden_histories: bool = False


class VenueConfig(Frozen):
    api: Literal["auto", "v1", "v2"] = "auto"
    rating_map: dict[str, float] | None = None
    source_limits: tuple[str, ...] = ()   # what the source cannot give; stated in the curation report
    # the venue's review-form field -> a review column (tasks/stages/ingest/forms.py), e.g. ICML's
    # { overall_recommendation = "rating" }; "ignore" drops a field. A new form is config, not code.
    form: dict[str, str] = {}

    @field_validator("form")
    @classmethod
    def _known_columns(cls, value: dict[str, str]) -> dict[str, str]:
        from tasks.core.schema import FORM_COLUMNS

        for field_name, column in value.items():
            if column not in FORM_COLUMNS:
                raise ValueError(f"{field_name} = {column!r}: not a review column (one of {sorted(FORM_COLUMNS)})")
        return value

    @field_validator("rating_map")
    @classmethod
    def _numeric_keys(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for key in value or {}:
            try:
                float(key)
            except ValueError:
                raise ValueError(f"the key {key!r} must be a number (a rating the venue's form offers)") from None
        return value

    def api_version(self, venue_id: str) -> int:
        """API v1 serves venues of 2023 and older, v2 the later ones."""
        if self.api != "auto":
            return int(self.api[1])
        years = [int(y) for y in re.findall(r"(?<!\d)(20\d\d)(?!\d)", venue_id)]
        return 1 if years and years[0] <= 2023 else 2


class SyntheticSource(Frozen):
    """The generated venue a "synthetic" pipeline serves from the local OpenReview server."""

    n_papers: int = Field(12, ge=1, le=100_000)
    reviews_per_paper: int = Field(4, ge=1, le=100)
    seed: Seed = 0
    pdfs: bool | Literal["lazy"] = True   # "lazy": each PDF rendered when first downloaded (large venues)
    bad_cases: bool = True
    form: Literal["ten_point", "iclr2026", "neurips2024"] = "ten_point"   # the review form's rating options
    reverted: bool = False        # every edited review restored to its pre-discussion state (ICLR 2026)
    access: Literal["open", "today"] = "open"   # "today": OpenReview's 2026 policy (login, limits, hidden histories)
    time_scale: float = Field(1.0, gt=0, le=1)  # "today": limit windows and token lifetime times this
    request_log: bool = False     # every answered request appended to data/<pipeline>/server/requests.jsonl
