"""The label rule against the real label texts of NeurIPS 2024 / 2025, ICLR 2024-2026 and TMLR: a
derived map equals the hand-written table where both exist; a map that breaks numeric order or
differs from a venue table stops in one line; labels are printed sanitised."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasks.core.config import Config, load_config
from tasks.stages.ingest.fetch import lookup_form
from tasks.stages.ingest.review_form import (
    FormError,
    Option,
    check_map,
    checked_table_form,
    derive_form,
    map_ratings,
)
from tasks.testing.openreview_server import serve_venues
from tasks.testing.synthetic import NEURIPS2024_RATINGS, make_venue

ROOT = Path(__file__).resolve().parents[3]
SCALE = [1, 3, 5, 6, 8, 10]
NEURIPS24, NEURIPS25 = "NeurIPS.cc/2024/Conference", "NeurIPS.cc/2025/Conference"
NEURIPS2025_LABELS = (
    "1: Strong Reject: For instance, a paper with well-known results or unaddressed ethical considerations",
    "2: Reject: For instance, a paper with technical flaws, weak evaluation, inadequate reproducibility and "
    "incompletely addressed ethical considerations.",
    "3: Borderline reject: Technically solid paper where reasons to reject, e.g., limited evaluation, outweigh "
    "reasons to accept, e.g., good evaluation. Please use sparingly.",
    "4: Borderline accept: Technically solid paper where reasons to accept outweigh reasons to reject, e.g., "
    "limited evaluation. Please use sparingly.",
    "5: Accept: Technically solid paper, with high impact on at least one sub-area of AI or moderate-to-high "
    "impact on more than one area of AI, with good-to-excellent evaluation, resources, reproducibility, and no "
    "unaddressed ethical considerations.",
    "6: Strong Accept: Technically flawless paper with groundbreaking impact on one or more areas of AI, with "
    "exceptionally strong evaluation, reproducibility, and resources, and no unaddressed ethical considerations.",
)
ICLR2026_LABELS = ("0: strong reject", "2: reject, not good enough",
                   "4: marginally below the acceptance threshold. But would not mind if paper is accepted",
                   "6: marginally above the acceptance threshold. But would not mind if paper is rejected",
                   "8: accept, good paper (poster)",
                   "10: strong accept, should be highlighted at the conference")
ICLR2024_LABELS = ("1: strong reject", "3: reject, not good enough", "5: marginally below the acceptance threshold",
                   "6: marginally above the acceptance threshold", "8: accept, good paper",
                   "10: strong accept, should be highlighted at the conference")


def options(labels) -> list[Option]:
    return [Option(float(label.split(":")[0]), label) for label in labels]


def v2_invitation(venue: str, labels) -> dict:
    enum = [{"value": int(label.split(":")[0]), "description": label} for label in labels]
    return {"id": f"{venue}/-/Official_Review", "edit": {"invitation": {"edit": {"note": {"content": {
        "rating": {"value": {"param": {"type": "integer", "enum": enum}}},
        "confidence": {"value": {"param": {"type": "integer", "enum": [1, 2, 3, 4, 5]}}}}}}}}}


def test_neurips_labels_as_the_invitations_write_them_derive_the_hand_tables_exactly():
    tables = load_config(ROOT / "pipelines.toml").venues
    got24 = map_ratings(NEURIPS24, "rating", options(NEURIPS2024_RATINGS.values()), SCALE)
    got25 = map_ratings(NEURIPS25, "rating", options(NEURIPS2025_LABELS), SCALE)
    assert got24 == (tables[NEURIPS24].rating_map, "threshold")
    assert got25 == (tables[NEURIPS25].rating_map, "threshold")
    assert got24[0]["5"] == 6 and got25[0]["4"] == 6    # "Borderline accept: ... reasons to reject" accepts


def test_iclr_2024_to_2026_labels_map_onto_the_scale_and_tmlr_without_a_rating_stops_in_one_line():
    assert map_ratings("I", "rating", options(ICLR2024_LABELS), SCALE) == (
        {"1": 1, "3": 3, "5": 5, "6": 6, "8": 8, "10": 10}, "identity")
    assert map_ratings("I", "rating", options(ICLR2026_LABELS), SCALE) == (
        {"0": 1, "2": 3, "4": 5, "6": 6, "8": 8, "10": 10}, "threshold")
    # TMLR's review asks two Yes/No criteria and no rating: the rule cannot place a threshold
    tmlr = {"id": "TMLR/-/Review", "edit": {"invitation": {"edit": {"note": {"content": {
        "summary_of_contributions": {"value": {"param": {"type": "string", "input": "textarea"}}},
        "claims_and_evidence": {"value": {"param": {"type": "string", "enum": ["Yes", "No"], "input": "radio"}}},
        "audience": {"value": {"param": {"type": "string", "enum": ["Yes", "No"], "input": "radio"}}}}}}}}}
    with pytest.raises(FormError) as raised:
        derive_form("TMLR", tmlr, None, SCALE, [1, 5])
    assert "\n" not in str(raised.value) and "no rating field with options" in str(raised.value)


def test_a_map_against_numeric_order_or_a_known_table_stops_in_one_line(tmp_path):
    with pytest.raises(FormError, match=r"breaks numeric order \(2->6 but 3->5\)"):
        check_map("X", "rating", {"1": 1, "2": 6, "3": 5})
    with pytest.raises(FormError, match=r"differs from the venue table .*5: 5 vs 6"):
        check_map("X", "rating", {"4": 5, "5": 5}, {"4": 5, "5": 6})
    # a venue table whose venue's own invitation sits in the raw cache is checked against it
    cfg = load_config(ROOT / "pipelines.toml")
    (tmp_path / "review_invitation.json").write_text(json.dumps(v2_invitation(NEURIPS25, NEURIPS2025_LABELS)))
    form = checked_table_form(NEURIPS25, cfg.venues[NEURIPS25], tmp_path, SCALE, [1, 5])
    assert form.source == "pipelines.toml"
    wrong = cfg.venues[NEURIPS25].model_copy(update={"rating_map": {"1": 1, "2": 3, "3": 5, "4": 5, "5": 8, "6": 10}})
    with pytest.raises(FormError) as raised:
        checked_table_form(NEURIPS25, wrong, tmp_path, SCALE, [1, 5])
    assert "\n" not in str(raised.value) and "4: 6 vs 5" in str(raised.value)


def test_a_neurips_form_served_by_the_local_server_derives_its_table(monkeypatch, tmp_path):
    venue = "NeurIPS.cc/2030/Conference"
    with serve_venues([make_venue(venue, n_papers=2, form="neurips2024", bad_cases=False, revisions=False)]) as server:
        monkeypatch.setenv("OPENREVIEW_TOKEN", server.issue_token())
        form = lookup_form(Config(root=tmp_path), venue, server.v2_url)
    tables = load_config(ROOT / "pipelines.toml").venues
    assert form.rule == "threshold" and form.rating_map == tables[NEURIPS24].rating_map


# ---- forms a hostile server serves: one printable line each, never a traceback ------------------------------
HOSTILE = "Hostile.cc/2030/Conference"


@pytest.fixture
def hostile(monkeypatch):
    """(server, serve): `serve(invitation)` has the local server answer `invitation` for HOSTILE's form."""
    with serve_venues([make_venue(HOSTILE, n_papers=2, bad_cases=False, revisions=False)]) as server:
        monkeypatch.setenv("OPENREVIEW_TOKEN", server.issue_token())

        def serve(invitation: dict) -> None:
            monkeypatch.setattr(server, "invitation", lambda api, ident: invitation)

        yield server, serve


def venues_form(server, tmp_path):
    from typer.testing import CliRunner

    from flows.cli.main import app

    (tmp_path / "pipelines.toml").write_text((ROOT / "pipelines.toml").read_text())
    return CliRunner().invoke(app, ["venues", "--form", HOSTILE, "--url", server.v2_url, "-c",
                                    str(tmp_path / "pipelines.toml")])


def test_an_invitation_without_id_is_one_line(hostile, tmp_path):
    server, serve = hostile
    serve({"edit": {"note": {"content": {}}}})
    out = venues_form(server, tmp_path)
    assert out.exit_code == 2 and out.output.count("\n") == 1 and "Traceback" not in out.output, out.output
    assert "came back malformed (KeyError: 'id')" in out.output


def test_option_values_of_a_million_and_more_print_their_mapping(hostile, tmp_path):
    server, serve = hostile
    labels = ["1000000: reject", "2000000: reject", "3000000: accept", "40000000: accept"]
    serve(v2_invitation(HOSTILE, labels) | {"id": f"{HOSTILE}/-/Official_Review"})
    out = venues_form(server, tmp_path)
    assert out.exit_code == 0, out.output
    assert "1000000: reject  ->  1" in out.output and "40000000: accept  ->  8" in out.output


def test_form_labels_are_printed_sanitised_and_cut(hostile, tmp_path):
    server, serve = hostile
    labels = ["1: reject \x1b[2J\x1b[31mred\x07", "2: reject\nerror: forged line", "3: accept " + "x" * 1_000_000]
    serve(v2_invitation(HOSTILE, labels))
    out = venues_form(server, tmp_path)
    assert out.exit_code == 0, out.output[:2000]
    assert "\x1b" not in out.output and "\x07" not in out.output
    assert not [line for line in out.output.splitlines() if line.startswith("error: forged")]
    assert max(len(line) for line in out.output.splitlines()) < 600
    # and in an error line: three labels that cannot be mapped
    serve(v2_invitation(HOSTILE, ["1: one\nerror: forged", "2: two\x1b[0m", "3: " + "y" * 1_000_000]))
    (tmp_path / "again").mkdir()
    out = venues_form(server, tmp_path / "again")   # a project of its own: the first form is in the raw cache
    assert out.exit_code == 2 and out.output.count("\n") == 1 and "\x1b" not in out.output, out.output[:500]
    assert len(out.output) < 2100 and "cannot place the acceptance threshold" in out.output


def test_an_invitation_nested_100000_deep_is_one_line(hostile, tmp_path):
    server, serve = hostile
    deep = '{"next": ' * 100_000 + '{"leaf": 1}' + "}" * 100_000
    serve(f'{{"id": "{HOSTILE}/-/Official_Review", "edit": {{"note": {{"content": {{"rating": {deep}}}}}}}}}'.encode())
    out = venues_form(server, tmp_path)
    assert out.exit_code == 2 and out.output.count("\n") == 1, out.output[-2000:]
    assert "came back malformed (RecursionError)" in out.output and not isinstance(out.exception, RecursionError)


def test_100000_options_are_mapped_in_linear_time():
    """Counted, not timed: the comparisons the mapping makes grow with the options, not their square."""
    counted = {"comparisons": 0}

    def counting(name: str):
        def compare(self, other):
            counted["comparisons"] += 1
            return getattr(float, name)(self, other)
        return compare

    Counted = type("Counted", (float,), {name: counting(name) for name in ("__lt__", "__le__", "__gt__", "__ge__")})

    def comparisons(count: int) -> int:
        labels = [f"{i}: reject" for i in range(count // 2)] + [f"{i}: accept" for i in range(count // 2, count)]
        counted["comparisons"] = 0
        form = [Option(Counted(o.value), o.label) for o in options(labels)]
        mapping, rule = map_ratings("X", "rating", form, SCALE)
        assert rule == "threshold" and mapping["0"] == 1 and mapping[str(count - 1)] == 10
        return counted["comparisons"]

    small, large = comparisons(1_000), comparisons(10_000)
    assert small > 0 and large < 20 * small, (small, large)   # linear (or n log n) is about 10x; quadratic 100x
    assert comparisons(100_000) < 200 * small


def test_a_wrong_neurips_table_stops_on_a_fresh_cache(hostile, tmp_path):
    from tasks.core.config import IngestConfig
    from tasks.stages.ingest.fetch import venue_form
    from tasks.stages.ingest.openreview_client import make_client
    from tasks.stages.ingest.review_form import known_labels

    server, _ = hostile
    tables = load_config(ROOT / "pipelines.toml").venues
    client = make_client(2, server.v2_url, IngestConfig(max_retries=0))
    for venue, key, point in ((NEURIPS25, "4", 5), (NEURIPS24, "5", 5)):
        wrong = tables[venue].model_copy(update={"rating_map": {**tables[venue].rating_map, key: point}})
        folder = tmp_path / venue / "raw"            # a fresh cache: no earlier command stored the invitation
        with pytest.raises(FormError, match=rf"differs from the venue table .*{key}: 6 vs 5"):
            venue_form(Config(root=tmp_path, venues={venue: wrong}), venue, client, 2, folder)
        assert not folder.exists()                   # no request was needed
        right = Config(root=tmp_path, venues={venue: tables[venue]})
        assert venue_form(right, venue, client, 2, folder).source == "pipelines.toml"
    # the shipped labels are the invitations' own
    assert known_labels(NEURIPS25) == list(NEURIPS2025_LABELS)
    assert known_labels(NEURIPS24) == list(NEURIPS2024_RATINGS.values())
