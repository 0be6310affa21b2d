"""Which server wrote a raw download cache: an address names the official OpenReview API, not any other.

The raw cache of a venue is keyed by the API's scheme, host and port (tasks/stages/ingest/sources.py).
The official hosts (`OFFICIAL_HOSTS`, over https) are identified by that address: a rerun against
them reads its cache with no network call. Any other server (a loopback test server, a mirror) may
be replaced by another on the same address, so its cache also holds a fingerprint of what it served
(`IDENTITY_FILE`): the first page of the venue's first submission listing (the count, and each
note's id, number, forum and title; no edit times). A rerun asks for that page once
(a cache a crashed run left has no fingerprint yet: its cached first page stands for it) and, when
the fingerprint differs (or a cache holds neither), moves the old cache aside under
`<cache>.replaced-<time>` (kept for inspection, not deleted) and fetches the venue anew, with one
line of log.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tasks.core.locks import write_bytes_atomic
from tasks.stages.ingest.forms import value

log = logging.getLogger(__name__)
OFFICIAL_HOSTS = ("api.openreview.net", "api2.openreview.net")
IDENTITY_FILE = "source.json"


def identified_by_address(baseurl: str) -> bool:
    """The official OpenReview API over https: its address says what it serves."""
    parts = urlsplit(baseurl)
    return parts.scheme == "https" and (parts.hostname or "").lower() in OFFICIAL_HOSTS


def fingerprint(invitation: str, count: int | None, notes: list[dict[str, Any]]) -> str:
    """What identifies the content a server serves for a venue: the size of its submission listing
    and every note of the listing's first page (sorted by number), without volatile fields. A server
    with the same count and the same first note but other papers after it differs."""
    identity = {"invitation": invitation, "count": count,
                "notes": [[n.get("id"), n.get("number"), n.get("forum"), value(n.get("content"), "title")]
                          for n in notes]}
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]


def stored_fingerprint(folder: Path) -> str | None:
    """The fingerprint kept with the cache in `folder`, or None."""
    try:
        found = json.loads((folder / IDENTITY_FILE).read_text()).get("fingerprint")
    except (OSError, ValueError, AttributeError):
        return None
    return found if isinstance(found, str) else None


def store_fingerprint(folder: Path, baseurl: str, served: str) -> None:
    if stored_fingerprint(folder) != served:
        write_bytes_atomic(folder / IDENTITY_FILE, json.dumps({"fingerprint": served, "url": baseurl}).encode())


def holds_cache(folder: Path) -> bool:
    """Some cached page, group or form is in `folder`."""
    return folder.is_dir() and any(folder.iterdir())


def move_aside(folder: Path, venue_id: str, baseurl: str, why: str) -> Path:
    """Rename the cache in `folder` to `<folder>.replaced-<time>`, with one line of log."""
    aside = folder.with_name(f"{folder.name}.replaced-{time.strftime('%Y%m%dT%H%M%S')}-{time.time_ns() % 10**6:06d}")
    os.replace(folder, aside)
    log.warning("%s: the server at %s %s; its old raw cache is moved to %s and the venue is fetched anew",
                venue_id, baseurl, why, aside)
    return aside
