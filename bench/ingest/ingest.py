"""Ingest (then curate) a synthetic venue of 12,000 papers / 48,000 reviews from the local server.

    .venv/bin/python bench/ingest/ingest.py [--papers 12000] [--reviews 4] [--api 2] [--no-profile] [--versions]

The server runs in a child process (generating the venue there), so the figures are those of the
ingesting process alone: wall time, peak resident memory (getrusage), and a cProfile breakdown of
where ingest time goes (our parsing vs the openreview client / HTTP / JSON decoding vs polars and
disk; taken in a separate profiled run, since cProfile slows Python code more than C code). A
second ingest from the raw page cache is timed too. `--versions` also reads the revision
histories (tasks/stages/ingest/versions.py: one request per edited review; papers' histories come with the PDF
step, which the bench leaves off). The last line printed is JSON.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import multiprocessing as mp
import pstats
import resource
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tasks.core.config import Config, IngestConfig, VenueConfig, load_config  # noqa: E402
from tasks.stages.ingest.fetch import ingest_venue  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
VENUES = {1: "ICLR.cc/2023/Conference", 2: "GREBench.cc/2025/Demo"}
STEPS = (   # (label, (file suffix, function)) measured by cumulative profiled time
    ("our parsing: normalise notes into rows (ingest/forms)", ("tasks/stages/ingest/forms.py", "normalise_submission")),
    ("our parsing: rows to polars frames", ("tasks/stages/ingest/fetch.py", "_frame")),
    ("our parsing: strip identity from client notes", ("tasks/stages/ingest/fetch.py", "note_json")),
    ("client + HTTP + JSON decode (openreview get_notes)", ("openreview/api/client.py", "get_notes")),
    ("client + HTTP + JSON decode (openreview get_notes, v1)", ("openreview/openreview.py", "get_notes")),
    ("raw page cache: atomic file writes", ("tasks/core/locks.py", "write_atomic")),
    ("raw page cache: JSON encode", ("json/__init__.py", "dumps")),
    ("Parquet writes", ("tasks/core/layout.py", "write_parquet")),
)


def _serve(n_papers: int, reviews: int, api: int, conn) -> None:
    from tasks.testing.openreview_server import serve_venues
    from tasks.testing.synthetic import make_venue

    start = time.perf_counter()
    venue = make_venue(VENUES[api], n_papers=n_papers, reviews_per_paper=reviews, pdfs=False)
    generated = time.perf_counter() - start
    with serve_venues([venue]) as server:
        server.warm(api, "directReplies")
        conn.send({"url": server.v1_url if api == 1 else server.v2_url, "generate_s": generated,
                   "serve_ready_s": time.perf_counter() - start, "reviews": venue.n_reviews})
        conn.recv()   # until the parent is done


def _shares(profile: cProfile.Profile, wall: float) -> dict[str, float]:
    """Percent of the profiled wall time spent under each step (cumulative time)."""
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    shares: dict[str, float] = {}
    for label, (suffix, name) in STEPS:
        cum = sum(ct for (f, _l, n), (_cc, _nc, _tt, ct, _c) in stats.items() if f.endswith(suffix) and n == name)
        if cum:
            shares[label] = round(100 * cum / wall, 1)
    shares["everything else (pagination, waiting, setup)"] = round(max(0.0, 100 - sum(shares.values())), 1)
    return shares


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--papers", type=int, default=12_000)
    parser.add_argument("--reviews", type=int, default=4)
    parser.add_argument("--api", type=int, choices=(1, 2), default=2)
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--versions", action="store_true", help="read revision histories (first / final reviews)")
    args = parser.parse_args()

    venue_id = VENUES[args.api]
    work = ROOT / "data" / "bench" / "ingest"
    shutil.rmtree(work, ignore_errors=True)
    base = load_config(ROOT / "pipelines.toml")
    cfg = Config(root=work, ingest=IngestConfig(pdf=False, page_size=1000, versions=args.versions),
                 curate=base.curate, venues={venue_id: base.venues.get(venue_id, VenueConfig())})

    parent, child = mp.Pipe()
    server = mp.get_context("spawn").Process(target=_serve, args=(args.papers, args.reviews, args.api, child))
    server.start()
    info = parent.recv()
    print(f"server: generated {args.papers} papers / {info['reviews']} reviews in {info['generate_s']:.1f}s, "
          f"ready in {info['serve_ready_s']:.1f}s")

    out = work / "ingest"
    start = time.perf_counter()
    result = ingest_venue(venue_id, cfg, out, info["url"])
    ingest_s = time.perf_counter() - start
    print(f"ingest: {ingest_s:.1f}s {result}")

    start = time.perf_counter()
    again = ingest_venue(venue_id, cfg, out, info["url"])
    rerun_s = time.perf_counter() - start
    print(f"rerun from the raw page cache: {rerun_s:.1f}s, pages fetched {again.pages_fetched}")
    peak_ingest_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    profile = None
    if not args.no_profile:   # a third, profiled run from an empty cache, for the breakdown only
        shutil.rmtree(cfg.data_dir / "raw", ignore_errors=True)
        profile = cProfile.Profile()
        start = time.perf_counter()
        profile.enable()
        ingest_venue(venue_id, cfg, work / "profiled", info["url"])
        profile.disable()
        profiled_s = time.perf_counter() - start
        print(f"profiled ingest: {profiled_s:.1f}s (cProfile overhead included)")
    parent.send("stop")
    server.join(timeout=30)

    curate_s, curated = None, None
    try:
        from tasks.stages.curate.rules import curate_venue
    except ImportError:
        print("tasks.stages.curate.rules is not available: ingest only")
    else:
        start = time.perf_counter()
        curated = curate_venue(out, venue_id, cfg, work / "curate")
        curate_s = time.perf_counter() - start
        print(f"curate: {curate_s:.1f}s {curated}")

    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    shares = _shares(profile, profiled_s) if profile else {}
    if profile:
        print("where ingest time goes (share of the profiled run's wall time):")
        for label, share in sorted(shares.items(), key=lambda kv: -kv[1]):
            print(f"  {share:5.1f}%  {label}")
        pstats.Stats(profile).sort_stats("tottime").print_stats(10)
    figures = {
        "papers": result.papers, "reviews": result.reviews, "reviews_ingested": result.reviews_ingested,
        "rejects": result.rejects, "pages": result.pages_fetched, "ingest_s": round(ingest_s, 2),
        "rerun_cached_s": round(rerun_s, 2), "peak_rss_ingest_mib": round(peak_ingest_mib, 1),
        "curate_s": round(curate_s, 2) if curate_s is not None else None,
        "papers_kept": curated.papers_kept if curated else None,
        "total_s": round(ingest_s + (curate_s or 0), 2), "peak_rss_mib": round(peak_mib, 1),
        "targets_met": ingest_s + (curate_s or 0) < 120 and peak_mib < 1536, "profile_share_pct": shares,
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
