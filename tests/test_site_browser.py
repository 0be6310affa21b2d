"""The site in a real browser: headless Chromium (Debian's `chromium`, driven by Playwright) opens it
from file://, reads the leaderboard rows, sorts a column, follows a link to a paper page, and finds
the review's `<script>` and `<img onerror>` payloads shown as text with no dialog raised. A
screenshot of the paper page is written under the test's data/ folder for a person to look at."""

import os
import shutil
from pathlib import Path

import pytest
from site_data import IMG, PAPER_TITLE, SCRIPT, write_database

from tasks.site import build_site

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
    assert [r[1] for r in rows] == ["human (human baseline)", "m-b", "m-a"]
    assert rows[1][2:6] == ["1.900", "1.200", "2.600", "2"]
    assert page.locator("section#gem-lm img").evaluate("img => img.naturalWidth") > 0    # the SVG chart loaded
    page.locator("section#gem-lm th", has_text="mean").first.click()                    # sort by mean, ascending
    assert gem.locator("td:nth-child(2)").all_inner_texts() == ["m-a", "m-b", "human (human baseline)"]

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
