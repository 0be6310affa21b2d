"""Review forms read from the venue: the official-review invitation (API v1 and v2 shapes) gives
the rating and confidence fields and their options, mapped onto the common scale by the rule of
docs/openreview.md; a yearly refresh needs no hand-written venue table and fetches PDFs only for
the benchmark sample."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest

from tasks.core.config import load_config
from tasks.stages.ingest.auth import forget_minted
from tasks.stages.ingest.review_form import FormError, Option, derive_form, map_ratings
from tasks.testing.openreview_server import Policy, serve_venues
from tasks.testing.synthetic import make_venue

ROOT = Path(__file__).resolve().parents[3]
SCALE = [1, 3, 5, 6, 8, 10]
ICLR26, ICLR23 = "ICLR.cc/2026/Conference", "ICLR.cc/2023/Conference"
USER, PASSWORD = "refresh@example.org", "pw-Refresh-2026"


def options(*labels: str) -> list[Option]:
    return [Option(float(label.split(":")[0]), label) for label in labels]


def test_neurips_forms_map_as_their_hand_written_tables_and_iclr_2026_onto_the_scale():
    tables = load_config(ROOT / "pipelines.toml").venues
    neurips24 = options("1: Very Strong Reject", "2: Strong Reject", "3: Reject", "4: Borderline reject",
                        "5: Borderline accept", "6: Weak Accept", "7: Accept", "8: Strong Accept",
                        "9: Very Strong Accept", "10: Award quality")
    neurips25 = options("1: Strong Reject", "2: Reject", "3: Borderline reject", "4: Borderline accept",
                        "5: Accept", "6: Strong Accept")
    assert map_ratings("N", "rating", neurips24, SCALE) == (tables["NeurIPS.cc/2024/Conference"].rating_map, "threshold")
    assert map_ratings("N", "rating", neurips25, SCALE) == (tables["NeurIPS.cc/2025/Conference"].rating_map, "threshold")
    iclr26 = options("0: strong reject", "2: reject", "4: marginally below the acceptance threshold",
                     "6: marginally above the acceptance threshold", "8: accept, good paper", "10: strong accept")
    assert map_ratings("I", "rating", iclr26, SCALE)[0] == {"0": 1, "2": 3, "4": 5, "6": 6, "8": 8, "10": 10}
    iclr25 = options("1: strong reject", "3: reject", "5: below", "6: above", "8: accept", "10: strong accept")
    assert map_ratings("I", "rating", iclr25, SCALE) == ({"1": 1, "3": 3, "5": 5, "6": 6, "8": 8, "10": 10}, "identity")


def test_a_form_that_cannot_be_mapped_stops_in_one_line_naming_the_field_and_its_options():
    unlabeled = {"id": "X.cc/2026/Conference/-/Official_Review",
                 "edit": {"note": {"content": {"overall_score": {"value": {"param": {
                     "type": "integer", "enum": [{"value": v, "description": f"{v}: level {v}"} for v in (1, 2, 4)]}}}}}}}
    with pytest.raises(FormError) as raised:
        derive_form("X.cc/2026/Conference", unlabeled, None, SCALE, [1, 5])
    message = str(raised.value)
    assert "\n" not in message and "'overall_score'" in message and "1: level 1; 2: level 2; 4: level 4" in message
    interleaved = options("1: reject", "2: accept", "3: reject", "4: accept")
    with pytest.raises(FormError, match="cannot place the acceptance threshold"):
        map_ratings("X", "rating", interleaved, SCALE)
    no_rating = {"id": "X/-/Official_Review", "reply": {"content": {"review": {"value-regex": ".*"}}}}
    with pytest.raises(FormError, match=r"no rating field with options .* \(fields: review\)"):
        derive_form("X", no_rating, None, SCALE, [1, 5])
    confident = {"id": "X/-/Official_Review", "reply": {"content": {
        "rating": {"value-radio": ["1: reject", "6: accept"]}, "confidence": {"value-radio": ["1: guess", "7: sure"]}}}}
    with pytest.raises(FormError, match="outside \\[curate\\] confidence_range 1-5: 7: sure"):
        derive_form("X", confident, None, SCALE, [1, 5])


@pytest.fixture(scope="module")
def forms_server():
    venues = [make_venue(ICLR26, n_papers=24, seed=7, form="iclr2026", bad_cases=False, revisions=False),
              make_venue(ICLR23, n_papers=6, seed=8, bad_cases=False)]
    policy = Policy.today(accounts={USER: PASSWORD}, integer_scores=frozenset({ICLR26}), limits={"pdf": (36, 3600.0)})
    with serve_venues(venues, page_limit=10, policy=policy) as server:
        yield server


@pytest.fixture
def logged_in(monkeypatch):
    monkeypatch.delenv("OPENREVIEW_TOKEN", raising=False)
    monkeypatch.setenv("OPENREVIEW_USERNAME", USER)
    monkeypatch.setenv("OPENREVIEW_PASSWORD", PASSWORD)
    forget_minted()
    yield
    forget_minted()


def refresh_config(project_config, server, stages: str = '"ingest", "curate"', sample: int = 3) -> Path:
    """A refresh pipeline whose "real" API is the local server, with no venue table for ICLR 2026."""
    return project_config(f"""
[pipelines.refresh]
source = "openreview"
venues = ["ICLR.cc/{{year}}/Conference"]
stages = [{stages}]

[pipelines.refresh.ingest]
api_v1_url = "{server.v1_url}"
api_v2_url = "{server.v2_url}"
page_size = 10
pdf_workers = 2
backoff_seconds = 0.01
max_backoff_seconds = 0.05
logged_in_requests_per_minute = 0
logged_in_pdfs_per_hour = 0      # the server still limits PDFs as OpenReview does (36 an hour)
edits_per_minute = 0

[pipelines.refresh.curate]
sample_size = {sample}

[pipelines.refresh.score]
metrics = ["gem_raw"]
baselines = ["rouge_l"]
eval_lm = "smollm2"
""")


def grebench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`grebench ARGS` in a child process (the installed entry point's code, this checkout)."""
    return subprocess.run([sys.executable, "-c", "from flows.cli.main import main; main()", *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


@pytest.mark.slow
def test_venues_form_reads_v2_and_v1_invitations_through_the_real_client(forms_server, logged_in, project_config):
    config = str(refresh_config(project_config, forms_server))
    out = grebench("venues", "--form", ICLR26, "--url", forms_server.v2_url, "-c", config)
    assert out.returncode == 0, out.stderr
    assert f"{ICLR26}: read from {ICLR26}/-/Official_Review (threshold rule" in out.stdout
    assert "4: marginally below the acceptance threshold  ->  5" in out.stdout
    assert "6: marginally above the acceptance threshold  ->  6" in out.stdout
    out = grebench("venues", "--form", ICLR23, "--url", forms_server.v1_url, "--json", "-c", config)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["source"] == "pipelines.toml"   # ICLR 2023 has its venue table: it wins
    out = grebench("venues", "--form", "Nowhere.cc/2026/Conference", "--url", forms_server.v2_url, "-c", config)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    assert "Nowhere.cc/2026/Conference: the review form could not be read (NotFoundError: group" in out.stderr


def test_a_v1_form_without_a_table_is_read_from_reply_content(forms_server, monkeypatch, tmp_path):
    from tasks.core.config import Config
    from tasks.stages.ingest.fetch import lookup_form

    monkeypatch.setenv("OPENREVIEW_TOKEN", forms_server.issue_token())

    form = lookup_form(Config(root=tmp_path), ICLR23, forms_server.v1_url)
    assert form.source == f"{ICLR23}/-/Official_Review" and form.rating_field == "recommendation"
    assert form.venue_config(1).form == {}    # "recommendation" is a built-in alias of rating
    assert form.rating_map["5"] == 5 and form.rating_map["6"] == 6 and form.rating_map["10"] == 10


@pytest.mark.slow
def test_a_refresh_without_a_venue_table_reads_the_form_and_fetches_pdfs_only_for_the_sample(
        forms_server, logged_in, project_config, tmp_path, prefect_harness):
    from flows.refresh import refresh_flow

    config = refresh_config(project_config, forms_server, '"ingest", "curate", "score", "materialize"')
    before = forms_server.count(2, "pdf")
    summary = refresh_flow(config_path=str(config), on="2025-12-15")
    ingest = summary["ingest"].details[ICLR26]
    assert ingest["form"].startswith(f"{ICLR26}/-/Official_Review: rating 0->1, 2->3, 4->5, 6->6, 8->8, 10->10")
    assert ingest["pdfs_needed"] == 3 and ingest["pdfs"] == 3 and ingest["pdfs_skipped"] > 10
    assert forms_server.count(2, "pdf") - before == 3                     # the sample's PDFs, no other
    cfg = load_config(config)
    database = cfg.database_for("refresh-2025")
    with duckdb.connect(str(database), read_only=True) as db:
        source, rule = db.execute("select source, rule from venue_forms").fetchone()
        assert (source, rule) == (f"{ICLR26}/-/Official_Review", "threshold")
        ratings = {r for (r,) in db.execute("select distinct rating from reviews").fetchall()}
        assert ratings <= {1, 3, 5, 6, 8, 10} and len(ratings) > 1
        assert db.execute("select count(distinct paper_id) from papers where in_benchmark").fetchone()[0] == 3
        assert db.execute("select count(*) from scores where metric = 'gem_raw'").fetchone()[0] > 0
    texts = pl.read_parquet(next((tmp_path / "data" / "refresh-2025").glob("*/ingest/pdf_texts.parquet")))
    assert texts.height == 3


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("faketime") is None, reason="faketime is not installed (apt-get install faketime)")
def test_schedule_dry_run_on_2025_12_15_plans_iclr_2026_with_its_derived_form(forms_server, project_config):
    config = project_config(f"""
[pipelines.refresh]
source = "openreview"
venues = ["ICLR.cc/{{year}}/Conference"]
stages = ["ingest", "curate"]

[ingest]
api_v2_url = "{forms_server.v2_url}"
""")
    text = config.read_text().replace('api_v2_url = "https://api2.openreview.net"',
                                      f'api_v2_url = "{forms_server.v2_url}"', 1)
    config.write_text(text.replace(f'\n[ingest]\napi_v2_url = "{forms_server.v2_url}"\n', "\n"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENREVIEW_USERNAME": USER, "OPENREVIEW_PASSWORD": PASSWORD}
    env.pop("OPENREVIEW_TOKEN", None)
    before = dict(forms_server.requests)          # the server is shared by the module's tests
    out = subprocess.run(["faketime", "2025-12-15 08:00:00", sys.executable, "-c", "from flows.cli.main import app; app()",
                          "schedule", "--dry-run", "-c", str(config)], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert "a run on 2025-12-15 pulls: ICLR.cc/2026/Conference" in out.stdout
    # a dry run sends no request: the form (derived from the invitation when the run fires) is said to come then
    assert (f"form of {ICLR26}: read from {ICLR26}/-/Official_Review when the run fires (not in the raw cache; "
            "a dry run sends no request)") in out.stdout
    assert "venue table" not in out.stdout.split("form of")[1] and "PDFs: at most 100" in out.stdout
    assert dict(forms_server.requests) == before
