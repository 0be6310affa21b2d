"""`grebench site`: the static site rendered from a tiny results database, escaping included."""

import re
from html.parser import HTMLParser

from typer.testing import CliRunner

from flows.cli.main import app
from tasks.core.layout import slug
from tasks.report.site import build_site
from tests.site_data import IMG, PAPER_TITLE, SCRIPT, write_database


class Scan(HTMLParser):
    """The tags and the visible text of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag):
        self._in_script = False if tag == "script" else self._in_script

    def handle_data(self, data):
        if not self._in_script:
            self.text.append(data)


def scan(path) -> Scan:
    parser = Scan()
    parser.feed(path.read_text())
    return parser


def test_site_pages_escape_review_text_and_link_up(tmp_path):
    site = build_site(write_database(tmp_path / "r.duckdb"), tmp_path / "site")
    names = sorted(str(p.relative_to(site.out_dir)) for p in site.pages)
    assert names == ["index.html", "leaderboard.html", "papers/P1.html", "papers/P2.html", "quality.html",
                     "runs.html", "validation.html"]                       # P3 is neither sampled nor reviewed by a model
    assert [p.name for p in site.charts] == ["leaderboard-gem-lm.svg", "cost-quality.svg"]   # bleu: no model has a value
    assert all(p.read_text().startswith("<svg") for p in site.charts)

    paper = scan(site.out_dir / "papers" / "P1.html")
    text = "".join(paper.text)
    assert SCRIPT in text and IMG in text and PAPER_TITLE in text      # shown as text ...
    assert [t for t, _ in paper.tags].count("script") == 1             # ... only the page's own sort script
    assert not [t for t, a in paper.tags if t == "img" or "onerror" in a or t in {"b", "i"}]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in (site.out_dir / "papers" / "P1.html").read_text()
    assert "The reviewer criticizes" in text and "Model says" in text   # judgments, candidates

    index = scan(site.out_dir / "index.html")
    links = {a["href"] for t, a in index.tags if t == "a"}
    assert {"papers/P1.html", "papers/P2.html", "leaderboard.html", "validation.html", "runs.html"} <= links
    assert re.search(r"2025.*2024", "".join(index.text), re.S)      # one section per year, newest first
    # no external resources: every src / href is relative
    for page in site.pages:
        for _, attrs in scan(page).tags:
            for key in ("src", "href"):
                assert not str(attrs.get(key, "")).startswith(("http:", "https:", "//")), (page, attrs)


def test_leaderboard_validation_and_runs_pages(tmp_path):
    site = build_site(write_database(tmp_path / "r.duckdb"), tmp_path / "site")
    board = (site.out_dir / "leaderboard.html").read_text()
    assert board.count('<tr class="model">') == 2 and board.count('<tr class="human">') == 1
    assert 'src="charts/leaderboard-gem-lm.svg"' in board and "90% CI low" in board
    # grouped by family, GEM's first and open; a board without a model's value is one line with its reason
    families = [a for t, a in scan(site.out_dir / "leaderboard.html").tags if t == "details"]
    assert [a["id"] for a in families] == ["family-gem-and-gem-s", "family-classic-baselines"]
    assert "open" in families[0] and "open" not in families[1]
    assert re.search(r'<p class="empty-board" id="bleu-sacrebleu"><strong>bleu</strong>.*no value \(no scores\)', board)
    validation = scan(site.out_dir / "validation.html")
    cells = [a for t, a in validation.tags if t == "td" and "title" in a]
    assert len(cells) == 3
    assert any("SMD -1.200" in a["title"] and "p 0.010" in a["title"] and a["class"] == "pass" for a in cells)
    assert any(a["class"] == "fail" for a in cells)
    runs = "".join(scan(site.out_dir / "runs.html").text)
    assert "abc123" in runs and "f00ba4" in runs and "3 LLM calls" in runs


def test_site_command_writes_under_the_data_dir(tmp_path):
    (tmp_path / "pipelines.toml").write_text("[paths]\ndata_dir = 'd'\ndatabase = 'd/r.duckdb'\n")
    (tmp_path / "d").mkdir()
    write_database(tmp_path / "d" / "r.duckdb")
    result = CliRunner().invoke(app, ["site", "-c", str(tmp_path / "pipelines.toml")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "d" / "site" / "index.html").is_file()
    assert "file://" in result.output


def test_site_command_without_a_database_says_what_to_run(tmp_path):
    (tmp_path / "pipelines.toml").write_text("")
    result = CliRunner().invoke(app, ["site", "-c", str(tmp_path / "pipelines.toml")])
    assert result.exit_code == 2 and "grebench run demo" in result.output


def test_slugs_are_safe_file_names():
    assert slug("smollm2-brief/EgHHNSDgdc") == "smollm2-brief_EgHHNSDgdc"
    assert slug("../x") == "_x"


REFRESH = """
[pipelines.refresh]
source = "openreview"
venues = ["ICLR.cc/{year}/Conference"]
stages = ["ingest", "curate", "materialize"]
"""


def test_the_refresh_writes_the_site_at_its_end(project_config, monkeypatch):
    """No Prefect server: the refresh flow's body, with a stand-in pipeline that leaves a database."""
    import flows.refresh

    config = project_config(REFRESH)
    database = config.parent / "data" / "refresh-2025" / "grebench.duckdb"   # a database per pipeline

    def pipeline(pipeline: str, config_path: str, venues=None):
        database.parent.mkdir(parents=True, exist_ok=True)
        write_database(database)
        return {}

    monkeypatch.setattr(flows.refresh, "pipeline_flow", pipeline)
    monkeypatch.setattr(flows.refresh, "require_login", lambda cfg, pipeline: None)   # tests/stages/ingest/test_openreview_login.py
    assert flows.refresh.refresh_flow.fn(year=2025, config_path=str(config)) == {}
    assert (database.parent / "site" / "papers" / "P1.html").is_file()


def test_a_partial_database_still_renders(tmp_path):
    """After ingest + curate + materialize only: papers and reviews, nothing scored yet."""
    import duckdb

    from tests.site_data import tables

    with duckdb.connect(str(tmp_path / "r.duckdb")) as con:
        for name in ("papers", "reviews"):
            con.register("frame", tables()[name])
            con.execute(f'CREATE TABLE "{name}" AS SELECT * FROM frame')
    site = build_site(tmp_path / "r.duckdb", tmp_path / "site")
    assert site.charts == [] and len(site.pages) == 7
    assert "No exam in this run" in (site.out_dir / "quality.html").read_text()
    assert "No leaderboard yet" in (site.out_dir / "leaderboard.html").read_text()
    assert "No scores for this paper yet" in (site.out_dir / "papers" / "P1.html").read_text()


def test_validation_has_a_matrix_per_level_and_eval_lm_with_inconclusive_cells(tmp_path):
    import duckdb
    import polars as pl

    validation = pl.DataFrame({
        "metric": ["gem", "gem", "gem"], "strategy": ["sentence_deletion"] * 3,
        "kind": ["degradation"] * 3, "level": ["judgments", "raw", "judgments"],
        "eval_lm": ["lm-a", "lm-a", "lm-b"], "n": [40, 40, 2], "smd": [-0.8, 0.1, -1.0],
        "ci_low": [-1.2, -0.3, -1.0], "ci_high": [-0.4, 0.5, -1.0], "p_value": [0.001, 0.7, 0.2],
        "passed": [True, False, None], "verdict": ["pass", "fail", "inconclusive"],
        "boot_low": [-1.1, -0.2, None], "boot_high": [-0.5, 0.4, None], "perturber": ["rules"] * 3,
        "reason": [None, None, "2 pairs, fewer than min_pairs"]})
    database = tmp_path / "r.duckdb"
    with duckdb.connect(str(database)) as con:
        con.register("frame", validation)
        con.execute("CREATE TABLE validation AS SELECT * FROM frame")
    site = build_site(database, tmp_path / "site")
    page = scan(site.out_dir / "validation.html")
    headings = [t for t in page.text if "level, evaluation LM" in t]
    assert headings == ["judgments level, evaluation LM lm-a", "judgments level, evaluation LM lm-b",
                        "raw level, evaluation LM lm-a"]
    cells = [a for t, a in page.tags if t == "td" and "title" in a]
    assert [a["class"] for a in cells] == ["pass", "na", "fail"]
    assert "bootstrap -1.100 to -0.500" in cells[0]["title"] and "min_pairs" in cells[1]["title"]
    assert "inconclusive" in "".join(page.text) and "1 / 1 degr." in "".join(page.text)


def test_judges_and_review_quality_page_and_not_qualified_columns(tmp_path):
    """The exam's verdicts, the review-quality means (points, rating_mae) and the points extracted are on
    their own page; a leaderboard column whose judge failed the exam is marked "not qualified"."""
    import duckdb
    import polars as pl

    database = write_database(tmp_path / "r.duckdb")
    extra = {
        "qualification": pl.DataFrame({"model": ["local/smollm2"] * 2 + ["readout:smollm2|float32|none"],
                                       "role": ["judge", "judge", "oracle"],
                                       "test": ["consistency", "pertinence", "consistency"], "n": [8, 8, 8],
                                       "score": [0.25, 0.75, 0.875], "threshold": [0.5, 0.5, 0.5],
                                       "passed": [False, True, True], "confidence": ["readout"] * 3,
                                       "qualified": [False, False, True]}),
        "review_quality_models": pl.DataFrame({"metric": ["points_recall_weaknesses", "rating_mae"],
                                               "model": ["m-a", "m-a"], "is_human": [False, False],
                                               "mean": [0.4, 1.5], "n_papers": [2, 2], "n_missing": [0, 0]}),
        "points": pl.DataFrame({"review_id": ["R1", "R1"], "source": ["human", "human"],
                                "field": ["weaknesses", "weaknesses"]}),
    }
    with duckdb.connect(str(database)) as con:
        for name, frame in extra.items():
            con.register("frame", frame)
            con.execute(f'CREATE TABLE "{name}" AS SELECT * FROM frame')
            con.unregister("frame")
        con.execute("ALTER TABLE leaderboard ADD COLUMN qualified BOOLEAN")
        con.execute("ALTER TABLE leaderboard ADD COLUMN note VARCHAR")
        con.execute("ALTER TABLE leaderboard ADD COLUMN predictor VARCHAR")
        con.execute("UPDATE leaderboard SET qualified = false, predictor = 'judge:readout:local/smollm2', "
                    "note = 'not qualified: judge local/smollm2 failed consistency' WHERE metric = 'gem'")
    site = build_site(database, tmp_path / "site")
    quality = "".join(scan(site.out_dir / "quality.html").text)
    assert "local/smollm2" in quality and "not qualified" in quality and "consistency" in quality
    assert "points_recall_weaknesses" in quality and "rating_mae" in quality and "weaknesses" in quality
    board = "".join(scan(site.out_dir / "leaderboard.html").text)
    assert "not qualified" in board and "failed consistency" in board
    assert "produced by judge:readout:local/smollm2" in board
    links = {a["href"] for t, a in scan(site.out_dir / "index.html").tags if t == "a"}
    assert "quality.html" in links


def test_the_releases_page_lists_each_release_with_its_models_in_the_order_they_came():
    """A release's row names no models (it is written once); the page reads them from `release_models`."""
    from datetime import UTC, datetime

    import polars as pl

    from tasks.report.site.build import release_context
    from tasks.stages.validate.releases import CHANGES, RELEASE_MODELS, RELEASES

    t0, t1 = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
    releases = pl.DataFrame([{"release_id": "r1", "pipeline": "t", "created_at": t0, "n_papers": 2, "n_references": 4,
                              "venues": ["V"], "papers": ["P0", "P1"], "metrics": ["bleu"], "eval_lms": [],
                              "prompts": []}], schema=RELEASES)
    models = pl.DataFrame({"release_id": ["r1", "r1", "r1"], "model": ["late", "human", "gen"],
                           "added_at": [t1, t0, t0]}, schema=RELEASE_MODELS)
    context = release_context({"releases": releases, "release_models": models,
                               "release_changes": pl.DataFrame(schema=CHANGES)})
    assert [r["models"] for r in context["releases"]] == [["gen", "human", "late"]]
    empty = release_context({"releases": releases, "release_models": pl.DataFrame(),
                             "release_changes": pl.DataFrame(schema=CHANGES)})
    assert empty["releases"][0]["models"] == []


def test_the_index_opens_with_the_overview_of_models_and_validated_metrics(tmp_path):
    site = build_site(write_database(tmp_path / "r.duckdb"), tmp_path / "site")
    index = scan(site.out_dir / "index.html")
    tables = [a for t, a in index.tags if t == "table"]
    assert tables[0]["id"] == "overview-table" and "sortable" in tables[0]["class"]
    heads = [a for t, a in index.tags if t == "th" and "data-metric" in a]
    assert [a["data-metric"] for a in heads] == ["gem", "bleu"]                  # [score] headline's order
    assert heads[0]["class"] == "metric verdict-pass" and heads[1]["class"] == "metric verdict-fail"
    text = " ".join(" ".join(index.text).split())
    assert "2 of 2 tests passed" in text and "0 of 1 tests passed, 1 failed" in text
    assert "human (human baseline)" in text and "1.900 [1.200, 2.600] #2" in text
    assert "validation.html#grid-raw" in {a.get("href") for t, a in index.tags if t == "a"}
    validation = scan(site.out_dir / "validation.html")
    assert "grid-judgments" in {a.get("id") for t, a in validation.tags}   # the site's rows carry no level


def test_the_overview_table_has_one_row_per_model_and_a_column_per_headline_metric(tmp_path):
    import duckdb

    with duckdb.connect(str(write_database(tmp_path / "r.duckdb", headline=("bleu", "gem", "llm_judge")))) as con:
        columns = [r[0] for r in con.execute("describe overview").fetchall()]
        rows = con.execute("select model, is_human, gem.mean, gem.rank, gem.tests_passed, gem.tests_run, "
                           "bleu.tests_failed, papers_scored, usd_per_review from overview").fetchall()
    assert columns == ["model", "is_human", "kind", "bleu", "gem", "papers_scored", "usd_per_review",
                       "tokens_per_review"]                            # llm_judge: named, not scored, no column
    assert [r[0] for r in rows] == ["human", "m-a", "m-b"]               # one row per model, the human first
    assert rows[2][1:] == (False, 1.9, 2, 2, 2, None, 2, 0.002)
    assert rows[0][1] is True and rows[1][6] == 1
