"""Control characters in what a chart labels (a model name, a metric, an evaluation LM): XML cannot
hold them, and vl-convert's SVG parser panics on one, aborting the whole process. The chart is drawn
without them; the page keeps the name as text."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tasks.report.site.charts import xml_safe

ROOT = Path(__file__).resolve().parents[2]
DRAW = """
from tasks.report.site.charts import leaderboard_chart, to_svg
rows = [{"model": "bell\\x07esc\\x1b[31m", "is_human": False, "mean": 1.0, "ci_low": 0.5, "ci_high": 1.5, "n_papers": 3},
        {"model": "human", "is_human": True, "mean": 0.8, "ci_low": 0.6, "ci_high": 1.0, "n_papers": 3}]
print(to_svg(leaderboard_chart(rows, "gem\\x0b (lm\\x0c)"))[:200])
"""


def test_a_model_name_with_control_characters_is_drawn(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", DRAW], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-500:]   # before: exit -6 (SIGABRT), "Failed to parse text SVG"
    assert "<svg" in done.stdout


def test_xml_safe_keeps_tabs_line_breaks_and_other_text() -> None:
    spec = {"title": "a\x07b\tc\nd\u202ee", "data": {"values": [{"model": "\x00m\x1f\ufffe"}]}, "width": 480}
    assert xml_safe(spec) == {"title": "ab\tc\nd\u202ee", "data": {"values": [{"model": "m"}]}, "width": 480}


def test_paper_ids_with_one_slug_get_pages_of_their_own(tmp_path: Path) -> None:
    import html
    import re

    import duckdb

    from tasks.report.site import build_site
    from tests.site_data import write_database

    database = write_database(tmp_path / "r.duckdb")
    with duckdb.connect(str(database)) as con:
        for table in ("papers", "reviews", "candidates", "scores"):
            for old, new in (("P1", "a<b"), ("P2", "a>b")):
                con.execute(f"update {table} set paper_id = ? where paper_id = ?", [new, old])
        titles = [title for (title,) in con.execute("select title from papers where paper_id like 'a_b'").fetchall()]
    out = build_site(database, tmp_path / "site").out_dir
    index = (out / "index.html").read_text()
    links = dict(re.findall(r'<a href="(papers/[^"]+)">([^<]*)</a>', index))   # page -> the title it links
    assert sorted(html.unescape(t) for t in links.values()) == sorted(titles)   # before: one page for both
    for page, title in links.items():
        assert title in (out / html.unescape(page)).read_text()
