"""The breaks round of the hardening soak (bench/soak/soak_hardening.py runs these beside its own): a
password a server echoes, text only rendering shows hidden, damaged files, malformed logins, forms nested
or wide beyond reason, hostile release and calibration files, unbounded settings, a power plan at its
edges, a venue table checked on a fresh cache, a second server that shares the first one's first note."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from soak_common import ROOT, Broken, check, cli, login_config, one_error_line, scenarios

NEURIPS25 = "NeurIPS.cc/2025/Conference"
PASSWORD = 'Soak"P\u00c4SS\\wQuagga77'          # a quote, a backslash, a non-ASCII letter; two ASCII words


def password_echoed(root: Path) -> None:
    """A server quoting the login body (the password in JSON escapes) in its error: `login --check` and a
    run print one line, and no file under the project or Prefect's home holds the password."""
    from tasks.testing.openreview_server import Fault, serve_venues
    from tasks.testing.synthetic import make_venue

    with serve_venues([make_venue("ICLR.cc/2025/Conference", n_papers=2, bad_cases=False)]) as server:
        config = login_config(root, server)
        server.inject(Fault("echo", times=100, endpoint="login"))
        env = {"OPENREVIEW_USERNAME": "me@soak.org", "OPENREVIEW_PASSWORD": PASSWORD, "PREFECT_HOME": str(root / "p"),
               "PREFECT_API_URL": ""}
        checked = cli(["login", "--check", "-c", str(config)], root, env=env)
        run = cli(["run", "leak", "-c", str(config)], root, env=env)   # a venue of its own: the run logs in
    one_error_line(checked, 2, "Cannot parse")
    one_error_line(run, 2, "Cannot parse")
    for text in (checked.stdout + checked.stderr, run.stdout + run.stderr):
        check("Soak" not in text and "Quagga77" not in text, "the password was printed")
    holding = [p for p in root.rglob("*") if p.is_file() and (b"Quagga77" in p.read_bytes() or b"Soak\\" in p.read_bytes())]
    check(not holding, f"files holding the password: {holding}")


def login_without_profile(root: Path) -> None:
    """`login --check` answered 200 without a profile or token shape: one line, never "logged in"."""
    from tasks.testing.openreview_server import Fault, serve_venues
    from tasks.testing.synthetic import make_venue

    with serve_venues([make_venue("ICLR.cc/2025/Conference", n_papers=2, bad_cases=False)]) as server:
        config = login_config(root, server)
        server.inject(Fault("no_profile", times=5, endpoint="profiles"))
        done = cli(["login", "--check", "-c", str(config)], root, env={"OPENREVIEW_TOKEN": server.issue_token()})
    one_error_line(done, 2, "without a profile")
    check("logged in" not in done.stdout, "said logged in")


def hidden_text_rendered(root: Path) -> None:
    """Render mode 7, text under a 40-point white stroke, black text on a black image: listed, stripped."""
    import pymupdf

    from tasks.stages.ingest.pdf import extract_text
    from tests.stages.ingest.test_pdf_hidden import RENDERED, pdf, plant_rendered

    doc = pymupdf.open("pdf", pdf())
    plant_rendered(doc[0])
    found = extract_text(doc.tobytes())
    check(sorted((r, t) for _, r, t in found.hidden) == sorted(RENDERED), f"hidden {found.hidden}")
    check(not any(t[:25] in found.text for _, t in RENDERED), "hidden text reached the paper text")


def damaged_files(root: Path) -> None:
    """A zero-byte, cut or random results database under plan, site and report; a cut stage output under
    materialize; a random LLM cache: one line naming the file each, exit 2, no traceback."""
    from tasks.core.damage import DamagedFileError
    from tasks.lm.cache import LLMCache
    from tasks.stages.materialize.build import build_database
    from tests.site_data import write_database
    from tests.stages.materialize.test_materialize import make_config, write_outputs

    (root / "pipelines.toml").write_text("[paths]\ndata_dir = 'data'\ndatabase = 'data/{pipeline}/grebench.duckdb'\n"
                                         "[pipelines.t]\nvenues = ['T.cc/2025/Conference']\nstages = ['materialize']\n")
    database = root / "data" / "t" / "grebench.duckdb"
    database.parent.mkdir(parents=True)
    whole = write_database(database).read_bytes()
    for damaged in (b"", whole[: len(whole) // 2], os.urandom(len(whole))):
        database.write_bytes(damaged)
        for args in (["plan", "--gap", "0.5"], ["site"], ["report"]):
            one_error_line(cli([*args, "-p", "t", "-c", str(root / "pipelines.toml")], root), 2, str(database))
    project = root / "built"
    project.mkdir()
    cfg = make_config(project)
    write_outputs(cfg)
    scores = cfg.data_dir / "t" / "venue" / "curate" / "reviews.parquet"
    scores.write_bytes(scores.read_bytes()[:100])
    for attempt in (lambda: build_database(cfg, "t"), lambda: LLMCache(_garbage(root / "llm.sqlite"))):
        try:
            attempt()
        except DamagedFileError as error:
            check("\n" not in str(error) and "is damaged" in str(error), str(error))
        else:
            raise Broken("a damaged file was read")


def _garbage(path: Path) -> Path:
    path.write_bytes(os.urandom(8192))
    return path


def forms_deep_and_wide(root: Path) -> None:
    """An invitation nested 100,000 deep: one line; 100,000 rating options: mapped within seconds."""
    from tasks.stages.ingest.review_form import Option, map_ratings
    from tasks.testing.openreview_server import serve_venues
    from tasks.testing.synthetic import make_venue

    venue = "Hostile.cc/2030/Conference"
    deep = '{"next": ' * 100_000 + "1" + "}" * 100_000
    with serve_venues([make_venue(venue, n_papers=2, bad_cases=False, revisions=False)]) as server:
        server.invitation = lambda api, ident: (f'{{"id": "{venue}/-/Official_Review", "edit": {{"note": {{"content": '
                                                f'{{"rating": {deep}}}}}}}}}').encode()
        (root / "pipelines.toml").write_text((ROOT / "pipelines.toml").read_text())
        done = cli(["venues", "--form", venue, "--url", server.v2_url, "-c", str(root / "pipelines.toml")], root,
                   env={"OPENREVIEW_TOKEN": server.issue_token()})
    one_error_line(done, 2, "came back malformed (RecursionError)")
    options = [Option(float(i), f"{i}: {'reject' if i < 50_000 else 'accept'}") for i in range(100_000)]
    started = time.monotonic()
    mapping, _ = map_ratings("X", "rating", options, [1, 3, 5, 6, 8, 10])
    check(len(mapping) == 100_000 and time.monotonic() - started < 10, f"{time.monotonic() - started:.1f} s")


def release_files(root: Path) -> None:
    """`reproduce gem-table2 --release` of an empty file, a CSV, a binary judgments column: one line naming
    it; six identical huge scores: no effect size."""
    import numpy as np
    import polars as pl

    from tasks.stages.validate.stats import smd

    (root / "pipelines.toml").write_text('[paths]\ndata_dir = "data"\ndatabase = "data/r.duckdb"\n')
    path = root / "mine.parquet"
    for write in (lambda: path.write_bytes(b""), lambda: path.write_bytes(b"forum,review\np1,x\n"),
                  lambda: pl.DataFrame({"forum": ["p"], "review": ["r"], "judgments": [b"\xff"]}).write_parquet(path)):
        write()
        done = cli(["reproduce", "gem-table2", "--release", str(path), "--metric", "bleu", "--strategies",
                    "sentence_deletion", "-c", str(root / "pipelines.toml")], root)
        one_error_line(done, 2, str(path))
    noise = np.random.default_rng(1).normal(0, 1e-11, 6)
    check(bool(np.isnan(smd(-1e5 + noise, -1e5 - 4e-5 + noise[::-1]))), "a near-constant SMD was measured")


def calibrate_inputs(root: Path) -> None:
    """`calibrate binoculars` on a list column, a malformed or empty CSV, -1.7e308: one line, nothing written."""
    import polars as pl

    config = root / "pipelines.toml"
    config.write_text('[paths]\ndata_dir = "data"\n')
    pl.DataFrame({"binoculars": [0.9, 0.95]}).write_csv(root / "ai.csv")
    writes: list[tuple[str, Callable[[Path], object], str]] = [
        ("parquet", lambda p: pl.DataFrame({"binoculars": [[0.5], [0.7]]}).write_parquet(p), "holds List"),
        ("csv", lambda p: p.write_bytes(b'binoculars\n"0.5\n0.6,,\xff'), "is damaged"),
        ("csv", lambda p: p.write_bytes(b""), "is damaged"),
        ("csv", lambda p: pl.DataFrame({"binoculars": [-1.7e308, 0.9]}).write_csv(p), "beyond")]
    for suffix, write, needle in writes:
        human = root / f"human.{suffix}"
        write(human)
        done = cli(["calibrate", "binoculars", "--human", str(human), "--ai", str(root / "ai.csv"), "--fpr", "0",
                    "-c", str(config)], root)
        one_error_line(done, 2, needle)
        check("threshold" not in config.read_text(), "a threshold was written")


def unbounded_settings(root: Path) -> None:
    """Settings that size memory or time far past reason, `model = "smollm2"` on a served evaluation LM and
    `batch_invariant` on an API backend: one line when the config loads, within seconds."""
    pipeline = "[pipelines.p]\nvenues = ['V/2025/C']\nstages = ['curate']\n"
    for text, needle in (("[validate]\nbootstrap_resamples = 10000000000\n", "bootstrap_resamples"),
                         ("[validate]\ncompare_resamples = 10000000000\n", "compare_resamples"),
                         (pipeline + "[pipelines.p.synthetic]\nn_papers = 1000000000\n", "n_papers"),
                         (pipeline + "[pipelines.p.synthetic]\nreviews_per_paper = 100000\n", "reviews_per_paper"),
                         ("[score.eval_server]\nbackend = 'openai'\napi = 'completions'\nmodel = 'smollm2'\n"
                          "base_url = 'http://127.0.0.1:9/v1'\n", "name the served model"),
                         ("[preprocess]\nbackend = 'anthropic'\nmodel = 'c'\nbatch_invariant = true\n", "batch_invariant")):
        (root / "pipelines.toml").write_text(text if text.startswith(pipeline) else text + pipeline)
        started = time.monotonic()
        one_error_line(cli(["run", "p", "-c", str(root / "pipelines.toml")], root), 2, needle)
        check(time.monotonic() - started < 60, f"{needle}: {time.monotonic() - started:.0f} s")


def plan_power(root: Path) -> None:
    """The planned papers: 3 at sd 0.06 and gap 0.5 (2 reach power 0.644), more for more power, never
    fewer for a wider spread."""
    from tasks.stages.validate.planning import paired_power, papers_needed

    check(papers_needed(0.06, 0.5) == 3 and abs(paired_power(2, 0.06, 0.5, 0.05) - 0.644) < 0.01, "sd 0.06, gap 0.5")
    for sd in (0.02, 0.06, 0.4):
        needed = [papers_needed(sd, 0.5, power=p) for p in (1e-300, 0.2, 0.5, 0.8, 0.95)]
        check(needed == sorted(needed), f"sd {sd}: {needed}")
    spread = [papers_needed(sd, 0.5) for sd in (0.01, 0.05, 0.06, 0.1, 0.5, 1.0)]
    check(spread == sorted(spread), f"by spread: {spread}")


def neurips_table_fresh_cache(root: Path) -> None:
    """A NeurIPS 2025 table saying "4" = 5 stops in one line on a fresh raw cache."""
    from tasks.core.config import Config, IngestConfig, load_config
    from tasks.stages.ingest.fetch import venue_form
    from tasks.stages.ingest.openreview_client import make_client
    from tasks.stages.ingest.review_form import FormError
    from tasks.testing.openreview_server import serve_venues
    from tasks.testing.synthetic import make_venue
    from tests.stages.ingest.test_hardening_forms import NEURIPS2025_LABELS, v2_invitation

    table = load_config(ROOT / "pipelines.toml").venues[NEURIPS25]
    wrong = table.model_copy(update={"rating_map": {**table.rating_map, "4": 5}})
    with serve_venues([make_venue(NEURIPS25, n_papers=2, bad_cases=False, revisions=False)]) as server:
        server.invitation = lambda api, ident: v2_invitation(NEURIPS25, NEURIPS2025_LABELS)
        os.environ["OPENREVIEW_TOKEN"] = server.issue_token()
        try:
            client = make_client(2, server.v2_url, IngestConfig(max_retries=0))
            venue_form(Config(root=root, venues={NEURIPS25: wrong}), NEURIPS25, client, 2, root / "raw")
        except FormError as error:
            check("4: 6 vs 5" in str(error) and "\n" not in str(error), str(error))
        else:
            raise Broken("the wrong table was used")
        finally:
            os.environ.pop("OPENREVIEW_TOKEN", None)


def same_first_note_other_papers(root: Path) -> None:
    """A second server on the first one's port with the same count and first note, 7 of 8 papers other:
    its own pages are read."""
    from urllib.parse import urlsplit

    import polars as pl

    from tasks.core.config import Config, IngestConfig
    from tasks.stages.ingest.fetch import ingest_venue
    from tasks.testing.openreview_server import serve_venues
    from tasks.testing.synthetic import make_venue

    venue = "GREBench.cc/2025/Demo"
    cfg = Config(root=root, ingest=IngestConfig(page_size=5, pdf=False, timeout_seconds=5, backoff_seconds=0.01,
                                                max_retries=1))
    served = make_venue(venue, n_papers=8, bad_cases=False, revisions=False)
    other = make_venue(venue, n_papers=8, seed=3, bad_cases=False, revisions=False)
    other.papers[0] = served.papers[0]
    with serve_venues([served], page_limit=5) as first:
        ingest_venue(venue, cfg, root / "out", first.v2_url)
    with serve_venues([other], page_limit=5, port=urlsplit(first.v2_url).port) as second:
        ingest_venue(venue, cfg, root / "out", second.v2_url)
    titles = set(pl.read_parquet(root / "out" / "papers.parquet")["title"])
    check(titles == {p.title for p in other.papers}, "the first server's papers were served")


def export_into_data(root: Path) -> None:
    """`export --out` into the data folder the pipelines keep their outputs in: one line, nothing written."""
    from tasks.core.config import load_config
    from tests.submit_data import write_config, write_curated

    config = write_config(root, ["bleu"], stages=("score", "validate", "materialize"))
    cfg = load_config(config).for_pipeline("t")
    write_curated(cfg)
    before = sorted(cfg.data_dir.rglob("*"))
    one_error_line(cli(["export", "--out", str(cfg.data_dir / "t"), "-c", str(config)], root), 2, "the data folder")
    check(sorted(cfg.data_dir.rglob("*")) == before, "something was written into data/")


BREAKS = scenarios(
    password_echoed, login_without_profile, hidden_text_rendered, damaged_files, forms_deep_and_wide,
    release_files, calibrate_inputs, unbounded_settings, plan_power, neurips_table_fresh_cache,
    same_first_note_other_papers, export_into_data,
)
