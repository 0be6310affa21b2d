"""The site in a real browser: headless Chromium (Debian's `chromium`, driven by Playwright) opens it
from file://, reads the leaderboard rows, sorts a column, follows a link to a paper page, and finds
the review's `<script>` and `<img onerror>` payloads shown as text with no dialog raised. A
screenshot of the paper page is written under the test's data/ folder for a person to look at."""

import os
import re
import shutil
from pathlib import Path

import pytest

from tasks.report.site import build_site
from tests.site_data import IMG, PAPER_TITLE, SCRIPT, write_database

CHROMIUM = os.environ.get("GREBENCH_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync"]

if CHROMIUM is None and os.environ.get("CI"):
    pytest.fail("CI must have chromium for the browser tests: .ci/install apt-installs it", pytrace=False)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (.ci/install apt-installs it)")


@pytest.fixture
def browser():
    playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


@pytest.mark.slow
def test_site_in_chromium_shows_payloads_as_text_and_raises_no_dialog(tmp_path, browser):
    data = tmp_path / "data"
    data.mkdir()
    site = build_site(write_database(data / "grebench.duckdb"), data / "site")
    page = browser.new_page(viewport={"width": 1100, "height": 1400})
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    outside: list[str] = []
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file://")
               else (outside.append(route.request.url), route.abort()))
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    page.goto(site.index.as_uri())
    page.click("text=Leaderboard")
    assert page.url.endswith("/leaderboard.html")
    gem = page.locator("section#gem-lm table.leaderboard tbody tr")
    rows = [[cell.strip() for cell in row.locator("td").all_inner_texts()] for row in gem.all()]
    assert [r[2] for r in rows] == ["human (human baseline)", "m-b", "m-a"]   # rank, rank interval, model
    heads = [h.strip() for h in page.locator("section#gem-lm table.leaderboard thead th").all_inner_texts()]
    row = dict(zip(heads, rows[1], strict=True))
    assert rows[1][3:6] == ["1.900", "1.200", "2.600"]
    # no flags here: the mean without flagged references is not measured (never a 0 shift)
    assert row["papers scored"] == "2" and row["without flagged refs"] == "not measured" and row["shift"] == "–"
    assert page.locator("section#gem-lm img").evaluate("img => img.naturalWidth") > 0    # the SVG chart loaded
    page.locator("section#gem-lm th", has_text="mean").first.click()                    # sort by mean, ascending
    assert gem.locator("td:nth-child(3)").all_inner_texts() == ["m-a", "m-b", "human (human baseline)"]

    page.goto(site.index.as_uri())
    page.click(f"text={PAPER_TITLE}")
    assert page.url.endswith("/papers/P1.html")
    assert page.locator("h1.paper-title").inner_text() == PAPER_TITLE
    review = page.locator(".human-review .review-text").first.inner_text()
    assert SCRIPT in review and IMG in review
    assert SCRIPT in page.locator(".candidate-review .review-text").first.inner_text()
    assert page.locator("img").count() == 0 and page.locator("main script").count() == 0
    page.locator("details summary").first.click()
    assert IMG in page.locator("ol.judgments").first.inner_text()
    page.screenshot(path=str(data / "site-paper.png"), full_page=True)

    page.goto((site.out_dir / "validation.html").as_uri())
    assert page.locator("td.fail").count() == 1 and page.locator("td.pass").count() == 2
    page.goto((site.out_dir / "runs.html").as_uri())
    assert "abc123" in page.locator("main").inner_text()

    assert dialogs == [] and errors == [] and outside == []
    assert Path(data / "site-paper.png").stat().st_size > 10_000


@pytest.mark.slow
@pytest.mark.timeout(3600)   # the session's demo run, when this is the first test to ask for it
def test_site_of_a_pipeline_run_shows_escaped_markup_from_openreview_as_text(browser, demo_run, demo_database,
                                                                              tmp_path):
    """The synthetic venue served to the real openreview-py client carries a review whose HTML holds
    escaped `<script>` and `<img onerror>`: after ingest strips the tags they are text, and the site
    built from the database of the session's demo run shows them as text with no dialog raised."""
    import duckdb

    from tasks.core.config import load_config
    from tasks.testing.synthetic import make_venue

    demo = load_config(demo_run[0] / "pipelines.toml").pipelines["demo"]
    o = demo.synthetic
    html_review = make_venue(demo.venues[0], n_papers=o.n_papers, reviews_per_paper=o.reviews_per_paper,
                             seed=o.seed, pdfs=o.pdfs, bad_cases=o.bad_cases).bad_cases["html"]
    with duckdb.connect(str(demo_database), read_only=True) as con:
        (paper_id, text), = con.execute("select paper_id, review_text from reviews where review_id = ?",
                                        [html_review]).fetchall()
    assert SCRIPT in text and IMG in text and "<b>" not in text
    data = tmp_path / "data"   # the shared run's folder is only read
    data.mkdir()
    site = build_site(demo_database, data / "site")
    page = browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(site.index.as_uri())
    page.locator(f"a[href='papers/{paper_id}.html']").first.click()
    shown = page.locator(".human-review .review-text").all_inner_texts()
    assert any(SCRIPT in t and IMG in t for t in shown)
    assert page.locator("main script").count() == 0 and page.locator("main img").count() == 0
    page.screenshot(path=str(data / "site-pipeline-paper.png"), full_page=True)
    assert dialogs == []


@pytest.mark.slow
def test_the_demo_site_opens_with_the_overview_and_draws_no_empty_chart(demo_database, browser, tmp_path):
    """The site built from the session's demo run, as a reader opens it: the overview table first on the index,
    GEM's column headed by its validation status with a link to the validation grid, rows sorted by a click on
    a header; on the leaderboard page GEM's family first, and every chart with a model's value behind it."""
    import duckdb

    site = build_site(demo_database, tmp_path / "site")
    page = browser.new_page(viewport={"width": 1200, "height": 1400})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(site.index.as_uri())
    assert page.locator("main table").first.get_attribute("id") == "overview-table"
    gem = page.locator("#overview-table thead th[data-metric='gem']")
    status = gem.locator("a.status")
    assert re.fullmatch(r"\d+ of \d+ tests passed(, \d+ failed)?(, \d+ inconclusive)?", status.inner_text().strip())
    target = status.get_attribute("href")
    assert target.startswith("validation.html#grid-")

    with duckdb.connect(str(demo_database), read_only=True) as con:
        means = dict(con.execute("select model, gem.mean from overview").fetchall())
    shown = page.locator("#overview-table tbody tr td:first-child")
    ascending = [m for m, _ in sorted(means.items(), key=lambda kv: kv[1])]
    gem.click(position={"x": 5, "y": 5})                        # the header, not its link
    assert [t.replace(" (human baseline)", "").strip() for t in shown.all_inner_texts()] == ascending
    gem.click(position={"x": 5, "y": 5})
    assert [t.replace(" (human baseline)", "").strip() for t in shown.all_inner_texts()] == ascending[::-1]

    status.click()                                                # the link opens the grid the status counts
    page.wait_for_url(f"**/{target}")
    assert page.locator(f"#{target.split('#')[1]}").count() == 1

    page.goto((site.out_dir / "leaderboard.html").as_uri())
    families = page.locator("details.family")
    assert families.first.get_attribute("id") == "family-gem-and-gem-s" and families.first.get_attribute("open") is not None
    for section in page.locator("details.family section:has(table.leaderboard)").all():
        section.evaluate("s => s.closest('details').open = true")
        assert section.locator("img").evaluate("img => img.naturalWidth") > 0
        values = section.locator("tbody tr.model td:nth-child(4)").all_inner_texts()
        assert any(v.strip() not in ("", "–") for v in values), section.get_attribute("id")
    for line in page.locator("p.empty-board").all():
        assert "no value (" in line.inner_text() and line.locator("img").count() == 0
    charts = {Path(p).name for p in page.locator("img").evaluate_all("imgs => imgs.map(i => i.getAttribute('src'))")}
    assert charts <= {p.name for p in site.charts}
    assert errors == []
