"""Ingest one v2 venue three ways, side by side in one run, against the local server:

    .venv/bin/python bench/ingest/ingest_today.py [--papers 200] [--reviews 4]

1. `lenient`: the server as it answered before 2026 (`Policy()`), a guest, every history asked;
2. `today-probe`: the server as OpenReview answers today (`Policy.today()`: login required, v2 edit
   histories hidden), a token, every history asked anyway (`probe_hidden_histories = true`);
3. `today-facts`: the same server, the venue facts trusted: hidden histories are not asked.

Per way: wall seconds, requests answered per endpoint, papers kept at their latest PDF because the
history is hidden, and what the same requests would take at the real pacing of pipelines.toml
(`[ingest]` logged-in API, edits and PDF rates: requests / rate, the three paced apart; the longest
of the three bounds the run). PDFs are on (paper histories come with the PDF step). Last line JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tasks.core.config import Config, IngestConfig, VenueConfig, load_config  # noqa: E402

VENUE = "ICLR.cc/2025/Conference"
ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--papers", type=int, default=200)
    parser.add_argument("--reviews", type=int, default=4)
    args = parser.parse_args()

    import os

    import polars as pl

    from tasks.core.schema import HIDDEN_PDF
    from tasks.stages.ingest.auth import forget_minted
    from tasks.stages.ingest.fetch import ingest_venue
    from tasks.testing.openreview_server import Policy, serve_venues
    from tasks.testing.synthetic import make_venue

    real = load_config(ROOT / "pipelines.toml").ingest
    venue = make_venue(VENUE, n_papers=args.papers, reviews_per_paper=args.reviews, bad_cases=False)
    ways = {"lenient": (Policy(), True), "today-probe": (Policy.today(limits={}), True),
            "today-facts": (Policy.today(limits={}), False)}
    out: dict[str, dict] = {}
    for name, (policy, probe) in ways.items():
        forget_minted()
        with serve_venues([venue], policy=policy) as server, tempfile.TemporaryDirectory() as tmp:
            if policy.guests:
                os.environ.pop("OPENREVIEW_TOKEN", None)
            else:
                os.environ["OPENREVIEW_TOKEN"] = server.issue_token()
            cfg = Config(root=Path(tmp), venues={VENUE: VenueConfig()},
                         ingest=IngestConfig(pdf=True, pdf_workers=4, probe_hidden_histories=probe,
                                             pdf_max_bytes=real.pdf_max_bytes))
            start = time.perf_counter()
            result = ingest_venue(VENUE, cfg, Path(tmp) / "out", server.v2_url)
            wall = time.perf_counter() - start
            papers = pl.read_parquet(Path(tmp) / "out" / "papers.parquet")
            answered = Counter(r.endpoint for r in server.log if r.status == 200)
        os.environ.pop("OPENREVIEW_TOKEN", None)
        edits = answered["edits"]
        pdfs = answered["pdf"] + answered["edit_pdf"]
        api = sum(answered.values())
        paced_h = {"api": api / real.logged_in_requests_per_minute / 60,
                   "edits": edits / real.edits_per_minute / 60, "pdfs": pdfs / real.logged_in_pdfs_per_hour}
        out[name] = {"wall_s": round(wall, 2), "requests": dict(sorted(answered.items())), "papers": result.papers,
                     "reviews": result.reviews, "pdfs_on_disk": result.pdfs,
                     "papers_latest_pdf_history_hidden": int((papers["pdf_version"] == HIDDEN_PDF).sum()),
                     "reviews_history_hidden": result.reviews_hidden,
                     "paced_hours_at_pipelines_toml": {k: round(v, 2) for k, v in paced_h.items()}}
        print(f"{name:12s} wall {wall:6.2f} s  requests {dict(sorted(answered.items()))}  hidden PDFs "
              f"{out[name]['papers_latest_pdf_history_hidden']}  paced (h) {out[name]['paced_hours_at_pipelines_toml']}")
    out["edits_saved_by_facts"] = out["today-probe"]["requests"].get("edits", 0) - out["today-facts"]["requests"].get(
        "edits", 0)
    out["papers"], out["reviews_per_paper"] = args.papers, args.reviews
    print(json.dumps(out))


if __name__ == "__main__":
    main()
