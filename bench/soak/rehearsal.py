"""The refresh rehearsed at ICLR 2026's size: every stage on a synthetic venue, at several sizes.

    nice -n 10 .venv/bin/python bench/soak/rehearsal.py [--scales 100,10,1] [--keep DIR]

For each scale S the `rehearsal` pipeline of pipelines.toml (19,525 submissions, the 2026 form and
access policy, reverted reviews, lazy PDFs; a sample of 20 papers, one SmolLM2 candidate, GEM and
BLEU) runs at 1/S of the size, as `grebench run` in a project folder of its own. Per stage it prints
wall time (the run record), peak RSS of the run's process tree (sampled every 0.2 s while the run
record says the stage runs; the local OpenReview server lives in the run's process, so ingest's figure
includes the served venue), the requests the local server answered, and rows in and out. Then each
stage's growth with size: the exponent b of time ~ size^b between the two largest scales (about 1:
linear, about 0: bound by the sample, not the venue), and time per thousand submissions at each scale.

The cost plan is checked against each run (`--no-cost` skips it): bench/cost/refresh_cost.py projects
the same venue (its submissions, the share curation kept, the sample, one candidate, the rehearsal's
metrics) with the text sizes measured from the run's own outputs, and the ratio projected / counted is
printed per stage for ingest requests, preprocess and generate LLM calls and tokens, and score pairs.
The first size is the pilot of the others: their plans take text sizes and the chat models' behaviour
(retries, answer lengths) from its run, so they predict runs they have not seen.
Also timed apart: generating the venue and rendering its API pages (`venue_s`). The last line is JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tasks.testing.rehearsal import (  # noqa: E402
    FULL_SIZE,
    error_line,
    latest_record,
    logged_requests,
    pipeline_name,
    rehearsal_project,
    start_run,
)

STAGES = ("ingest", "curate", "preprocess", "generate", "score", "validate", "materialize")


def tree_rss(proc: psutil.Process) -> int:
    """Resident bytes of `proc` and its descendants now (0 when it is gone)."""
    total = 0
    try:
        for p in [proc, *proc.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                total += p.memory_info().rss
    except psutil.Error:
        return 0
    return total


def run_measured(config: Path, pipeline: str, timeout: float) -> tuple[int, list[tuple[float, int]], str]:
    """Run the pipeline to its end, sampling its tree's RSS: (exit code, [(epoch s, bytes)], error line)."""
    proc = start_run(config, pipeline)
    watched = psutil.Process(proc.pid)
    samples: list[tuple[float, int]] = []
    began = time.monotonic()
    while proc.poll() is None and time.monotonic() - began < timeout:
        samples.append((time.time(), tree_rss(watched)))
        time.sleep(0.2)
    if proc.poll() is None:
        proc.kill()
        proc.wait()
        return -1, samples, "timed out"
    return proc.returncode, samples, error_line(proc) if proc.returncode else ""


def venue_seconds(n_papers: int) -> float:
    """Seconds to generate the venue and render its API v2 pages (what the server does before answering)."""
    from tasks.testing.openreview_render import render_venue
    from tasks.testing.synthetic import make_venue

    start = time.perf_counter()
    venue = make_venue("ICLR.cc/2026/Conference", n_papers=n_papers, pdfs="lazy", form="iclr2026", reverted=True)
    render_venue(venue, 2)
    return time.perf_counter() - start


def stage_rows(config: Path, pipeline: str, samples: list[tuple[float, int]]) -> list[dict]:
    record = latest_record(config, pipeline)
    requests = logged_requests(config, pipeline)
    rows = []
    for stage in record.iter_rows(named=True):
        start, end = stage["started_at"].timestamp(), (stage["ended_at"] or stage["started_at"]).timestamp()
        inside = [rss for at, rss in samples if start - 0.2 <= at <= end + 0.2]
        rows.append({"stage": stage["stage"], "status": stage["status"], "seconds": round(stage["duration_s"] or 0, 2),
                     "peak_rss_mb": round(max(inside) / 2**20) if inside else None,
                     "requests": sum(1 for r in requests if start <= r["at"] <= end),
                     "rows_in": stage["rows_in"], "rows_out": stage["rows_out"], "llm_calls": stage["llm_calls"],
                     "input_tokens": stage["input_tokens"], "output_tokens": stage["output_tokens"]})
    return rows


def growth(by_scale: dict[int, dict]) -> dict[str, dict]:
    """Per stage: time per 1,000 submissions at each size and the exponent between the two largest sizes."""
    sizes = sorted(by_scale.items(), key=lambda kv: kv[1]["submissions"])
    out = {}
    for stage in STAGES:
        points = [(run["submissions"], next((r["seconds"] for r in run["stages"] if r["stage"] == stage), None))
                  for _, run in sizes]
        points = [(n, t) for n, t in points if t]
        if not points:
            continue
        entry: dict = {"s_per_1000_submissions": {str(n): round(t / n * 1000, 3) for n, t in points}}
        if len(points) >= 2:
            (n1, t1), (n2, t2) = points[-2], points[-1]
            b = math.log(t2 / t1) / math.log(n2 / n1)
            entry["exponent"] = round(b, 2)
            entry["growth"] = ("bound by the sample (flat)" if b < 0.3 else "sublinear" if b < 0.8
                               else "linear" if b <= 1.2 else "faster than linear")
        out[stage] = entry
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scales", default="100,10,1", help="denominators of ICLR 2026's size, comma-separated")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temp folder)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds one run may take")
    parser.add_argument("--no-cost", action="store_true", help="skip the cost plan's check")
    parser.add_argument("--reuse", action="store_true",
                        help="run nothing: read the runs already in --keep (no RSS samples then)")
    args = parser.parse_args()
    if args.reuse and args.keep is None:
        parser.error("--reuse reads the runs of --keep DIR")
    work = args.keep or Path(tempfile.mkdtemp(prefix="grebench-rehearsal-"))
    by_scale: dict[int, dict] = {}
    pilot: tuple[Path, int] | None = None
    try:
        for scale in [int(s) for s in args.scales.split(",")]:
            n = round(FULL_SIZE / scale)
            config = work / f"x{scale}" / "pipelines.toml" if args.reuse else rehearsal_project(work / f"x{scale}", scale)
            pipeline = pipeline_name(scale)
            if args.reuse:
                made, code, samples, error, wall = float("nan"), 0, [], "", float("nan")
            else:
                made = venue_seconds(n)
                began = time.monotonic()
                code, samples, error = run_measured(config, pipeline, args.timeout)
                wall = time.monotonic() - began
            stages = stage_rows(config, pipeline, samples)
            run = {"scale": f"1/{scale}", "submissions": n, "exit": code, "error": error, "wall_s": round(wall, 1),
                   "venue_s": round(made, 2), "stages": stages}
            if code == 0 and not args.no_cost:
                from bench.cost.rehearsal_check import check_costs

                run["cost_check"] = check_costs(config, pipeline, n, stages, pilot)
                pilot = pilot or (config.parent / "data" / pipeline, n)
            by_scale[scale] = run
            print(f"\n1/{scale}: {n:,} submissions, exit {code} {error}; run {wall:.0f} s; venue generated and "
                  f"rendered in {made:.1f} s", flush=True)
            print(f"{'stage':<12}{'s':>9}{'peak MB':>9}{'requests':>9}{'rows in':>10}{'rows out':>10}{'LLM calls':>10}")
            for r in stages:
                print(f"{r['stage']:<12}{r['seconds']:>9.1f}{r['peak_rss_mb'] or 0:>9}{r['requests']:>9}"
                      f"{r['rows_in'] or 0:>10,}{r['rows_out'] or 0:>10,}{r['llm_calls']:>10}", flush=True)
            for line in run.get("cost_check", {}).get("lines", []):
                print(line, flush=True)
        grown = growth(by_scale)
        print("\ngrowth with size (time ~ size^b between the two largest sizes):")
        for stage, g in grown.items():
            print(f"  {stage:<12} b = {g.get('exponent', '-')!s:<6} {g.get('growth', ''):<28} "
                  f"s per 1,000 submissions: {g['s_per_1000_submissions']}")
        print(json.dumps({"runs": list(by_scale.values()), "growth": grown}))
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
