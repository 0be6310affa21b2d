from pathlib import Path

import pytest

from tasks.checks import load_checked_config
from tasks.core.config import ConfigError, VenueConfig, load_config

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pipelines.toml"
    path.write_text(text)
    return path


def test_project_config_loads_and_every_pipeline_merges():
    cfg = load_config(ROOT / "pipelines.toml")
    assert cfg.curate.min_confidence == 4
    assert cfg.curate.max_rating_variance == 1.5
    assert (cfg.curate.min_reviews, cfg.curate.max_reviews) == (3, 5)
    for name, spec in cfg.pipelines.items():
        if any("{year}" in venue for venue in spec.venues):
            name = f"{name}-2026"
        merged = cfg.for_pipeline(name)
        assert merged.pipelines[name].stages
    assert cfg.for_pipeline("demo").curate.sample_size == 9
    assert cfg.for_pipeline("demo").database == ROOT / "data" / "demo" / "grebench.duckdb"   # one per pipeline


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[curate]\nmin_confidense = 4\n", "curate.min_confidense: unknown key"),
        ("[curate]\nmin_confidence = 'four'\n", "curate.min_confidence:"),
        ("[ingest]\npage_size = 5000\n", "ingest.page_size:"),
        ("[curate]\nmin_reviews = 6\n", "min_reviews must not exceed max_reviews"),
        ("[pipelines.x]\nvenues = []\nstages = ['ingest']\n", "pipelines.x.venues:"),
        ("[pipelines.x]\nvenues = ['V']\nstages = ['cook']\n", "pipelines.x.stages.0:"),
        ("[venues.'V/2024']\napi = 'v3'\n", "venues.V/2024.api:"),
        ("[curate\n", "not valid TOML"),
    ],
)
def test_bad_config_is_one_line_naming_the_key(tmp_path, text, message):
    with pytest.raises(ConfigError) as error:
        load_config(write(tmp_path, text))
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.toml")


def test_pipeline_override_is_validated_like_the_stage(tmp_path):
    path = write(
        tmp_path,
        "[pipelines.p]\nvenues = ['V']\nstages = ['curate']\n[pipelines.p.curate]\nseed = 'x'\n",
    )
    with pytest.raises(ConfigError, match="pipelines.toml: pipelines.p.curate.seed"):   # at load, with the file
        load_config(path)
    path.write_text(path.read_text().replace("seed = 'x'", "seed = 3"))
    assert load_config(path).for_pipeline("p").curate.seed == 3
    with pytest.raises(ConfigError, match="unknown pipeline 'q'"):
        load_config(path).for_pipeline("q")


def test_relative_paths_resolve_against_the_file(tmp_path):
    cfg = load_config(write(tmp_path, "[paths]\ndata_dir = 'out'\n"))
    assert cfg.data_dir == tmp_path / "out"


@pytest.mark.parametrize(
    ("venue", "api", "expected"),
    [
        ("ICLR.cc/2023/Conference", "auto", 1),
        ("ICLR.cc/2022/Conference", "auto", 1),
        ("ICLR.cc/2024/Conference", "auto", 2),
        ("NeurIPS.cc/2025/Conference", "auto", 2),
        ("ICLR.cc/2023/Conference", "v2", 2),
    ],
)
def test_api_version_by_year(venue, api, expected):
    assert VenueConfig(api=api).api_version(venue) == expected


def test_yearly_template_pipelines_fill_in_the_year(tmp_path):
    cfg = load_config(write(tmp_path, """
[pipelines.refresh]
venues = ["ICLR.cc/{year}/Conference", "NeurIPS.cc/{year}/Conference"]
stages = ["ingest"]
[pipelines.refresh.curate]
sample_size = 7
"""))
    merged = cfg.for_pipeline("refresh-2026")
    assert merged.pipelines["refresh-2026"].venues == ("ICLR.cc/2026/Conference", "NeurIPS.cc/2026/Conference")
    assert merged.curate.sample_size == 7
    assert cfg.for_pipeline("refresh-2026", ["X/2026/Y"]).pipelines["refresh-2026"].venues == ("X/2026/Y",)
    with pytest.raises(ConfigError, match="yearly template"):
        cfg.for_pipeline("refresh")
    with pytest.raises(ConfigError, match="unknown pipeline"):
        cfg.for_pipeline("nothing-2026")


def test_a_pipeline_extends_another_key_by_key(tmp_path):
    (tmp_path / "pipelines.toml").write_text("""
[pipelines.base]
description = "the base"
venues = ["A.cc/2024/Conference"]
stages = ["ingest", "curate", "score"]
[pipelines.base.curate]
sample_size = 5
min_reviews = 3
[pipelines.base.score]
metrics = ["gem"]
negatives = 2

[pipelines.more]
extends = "base"
stages = ["ingest", "curate"]
[pipelines.more.curate]
sample_size = 1
""")
    cfg = load_config(tmp_path / "pipelines.toml")
    more = cfg.for_pipeline("more")
    assert more.pipelines["more"].venues == ("A.cc/2024/Conference",) and more.pipelines["more"].stages == ("ingest", "curate")
    assert more.pipelines["more"].description == ""                  # a description is not inherited
    assert (more.curate.sample_size, more.curate.min_reviews) == (1, 3)   # merged key by key, its own key wins
    assert (more.score.metrics, more.score.negatives) == (("gem",), 2)
    assert cfg.for_pipeline("base").curate.sample_size == 5           # the base is unchanged


@pytest.mark.parametrize("text, message", [
    ('[pipelines.a]\nextends = "nowhere"\nvenues = ["A.cc/2024/Conference"]\nstages = ["ingest"]\n', "unknown pipeline 'nowhere'"),
    ('[pipelines.a]\nextends = "b"\n[pipelines.b]\nextends = "a"\n', "a cycle"),
])
def test_a_bad_extends_is_one_line(tmp_path, text, message):
    (tmp_path / "pipelines.toml").write_text(text)
    with pytest.raises(ConfigError, match=message) as error:
        load_config(tmp_path / "pipelines.toml")
    assert "\n" not in str(error.value) and "extends" in str(error.value)


@pytest.mark.parametrize("reverse", [False, True], ids=["bases-first", "bases-last"])
def test_extends_chains_resolve_in_linear_work(tmp_path, monkeypatch, reverse):
    """Each pipeline is resolved and validated once, with itself alone: ten times the pipelines is ten
    times the validation work (it was a hundred), and a chain deeper than Python's recursion limit loads."""
    from tasks.core import config_base

    calls = []
    real = config_base.check_venue_id
    monkeypatch.setattr(config_base, "check_venue_id", lambda v: calls.append(v) or real(v))
    monkeypatch.setattr("tasks.core.config.check_venue_id", config_base.check_venue_id)

    def checked(n: int) -> int:
        order = list(reversed(range(n))) if reverse else list(range(n))
        chain = "".join(f'\n[pipelines.p{i}]\nextends = "{"demo" if i == 0 else f"p{i - 1}"}"\n' for i in order)
        path = tmp_path / f"chain{n}.toml"
        path.write_text((ROOT / "pipelines.toml").read_text() + chain)
        calls.clear()
        cfg = load_checked_config(path)
        assert cfg.pipelines[f"p{n - 1}"].venues == cfg.pipelines["demo"].venues
        assert list(cfg.pipelines)[-n:] == [f"p{i}" for i in order]    # the file's order
        return len(calls)

    small, large = checked(20), checked(200)
    assert large < 12 * small, (small, large)
    checked(1500)   # deeper than the recursion limit


def test_the_headline_metrics_are_checked_against_the_registry_at_load(tmp_path):
    """[score] headline (the overview's columns) names registry metrics, in a pipeline's table too: a typo stops
    the load in one line naming the key, where a column would silently be missing from the overview."""
    path = tmp_path / "pipelines.toml"
    shared = (ROOT / "pipelines.toml").read_text()
    assert load_checked_config(ROOT / "pipelines.toml").for_pipeline("demo").score.headline[0] == "gem"
    path.write_text(shared + '\n[pipelines.typo]\nvenues = ["A.cc/2024/Conference"]\nstages = ["score"]\n'
                             '[pipelines.typo.score]\nheadline = ["gem", "gem_s_asw"]\n')
    with pytest.raises(ConfigError, match=r"pipelines\.typo\.score\.headline: unknown metric\(s\) \['gem_s_asw'\]"):
        load_checked_config(path)


def test_full_gives_the_adversary_at_least_min_pairs_test_pairs_and_a_config_that_cannot_is_refused(tmp_path):
    """The adversary's rows decide only on min_pairs test pairs, and its search and test share no paper: `full`
    searches on papers outside its 10-paper sample and tests on every candidate; splitting those 10 in two would
    leave 5 test pairs, which the load refuses in one line."""
    from tasks.stages.validate.adversary import papers_tested

    v = load_checked_config(ROOT / "pipelines.toml").for_pipeline("full").validate
    assert "adversary" in v.strategies and v.candidates == "one" and v.adversary_search_papers > 0
    assert papers_tested(v.max_papers, v.adversary_search_papers) == v.max_papers >= v.min_pairs
    path = tmp_path / "pipelines.toml"
    path.write_text((ROOT / "pipelines.toml").read_text().replace(
        "adversary_search_papers = 4", "adversary_search_papers = 0"))
    assert papers_tested(10) == 5
    with pytest.raises(ConfigError, match=r"pipelines\.full\.validate: the adversary is tested on the half of "
                                          r"max_papers = 10 .* at most 5 pair\(s\), fewer than min_pairs = 10"):
        load_checked_config(path)
