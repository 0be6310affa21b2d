"""The hostile round of the hardening soak (bench/soak/soak_hardening.py runs these beside its own): ids a
server sends as paths, a password echoed as HTML entities, in NFD or past a cut, config writes a TOML
reader must read back, downloads that trickle, swell or stop short, settings without bounds, stage
outputs of the wrong kind, hostile workbooks, text hidden by its matrix (both ways or one way only) or under
shapes only rendering judges."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from soak_common import check, cli, login_config, one_error_line, scenarios

PASSWORD = 'Yak42"v\u00c4\rsZebra99'   # a quote, a letter NFD writes as two code points, a carriage return


def path_like_ids(root: Path) -> None:
    """A server whose paper and review ids are `../../../../tmp/x/pwnN`: ingest (every PDF, histories
    read) writes nothing outside its folder and keeps the papers under safe file names."""
    from tasks.core.config import Config, IngestConfig
    from tasks.stages.ingest.fetch import ingest_venue
    from tasks.testing.openreview_server import serve_venues
    from tasks.testing.synthetic import make_venue
    from tests.stages.ingest.test_hardening_ingest import hostile_ids

    outside = Path(tempfile.mkdtemp(prefix="grebench-soak-outside-")) / "x"
    venue = hostile_ids(make_venue("GREBench.cc/2025/Demo", n_papers=4, seed=7, bad_cases=False), outside)
    with serve_venues([venue], page_limit=5) as server:
        cfg = Config(root=root, ingest=IngestConfig(page_size=5, pdf=True, versions=True, pdf_workers=2,
                                                    max_retries=1, backoff_seconds=0.01, timeout_seconds=10))
        result = ingest_venue("GREBench.cc/2025/Demo", cfg, root / "out", server.v2_url)
    check(not outside.exists(), f"written outside the data folder: {sorted(outside.rglob('*'))}")
    check(result.pdfs > 0 and result.pdf_texts == result.pdfs, f"{result.pdfs} PDFs, {result.pdf_texts} read")


def password_encodings(root: Path) -> None:
    """A server echoing the login body as HTML entities, in NFD, or long enough that a 200-character cut
    lands inside the password: `login --check` is one line without it; a run (with an empty
    PREFECT_API_URL) is one `error:` line, no traceback, and no file holds the password."""
    from tasks.testing.openreview_server import Fault, serve_venues
    from tasks.testing.synthetic import make_venue

    env = {"OPENREVIEW_USERNAME": "me@soak.org", "OPENREVIEW_PASSWORD": PASSWORD, "PREFECT_HOME": str(root / "p"),
           "PREFECT_API_URL": ""}
    with serve_venues([make_venue("ICLR.cc/2025/Conference", n_papers=2, bad_cases=False)]) as server:
        config = login_config(root, server)
        outputs = []
        for echo_as in ("html", "nfd", "long"):
            server.inject(Fault("echo", times=100, endpoint="login", echo_as=echo_as))
            outputs.append(cli(["login", "--check", "-c", str(config)], root, env=env))
            server.clear()
        server.inject(Fault("echo", times=100, endpoint="login", echo_as="html"))
        run = cli(["run", "leak", "-c", str(config)], root, env=env)
    for done in outputs:
        one_error_line(done, 2, "login as me@soak.org failed")
    one_error_line(run, 2, "login as me@soak.org failed")
    check("stopped service" not in run.stderr, "Prefect's events failed")
    for done in (*outputs, run):
        check("Yak42" not in done.stdout + done.stderr and "Zebra99" not in done.stdout + done.stderr,
              "the password was printed")
    holding = [p for p in root.rglob("*") if p.is_file() and (b"Yak42" in p.read_bytes() or b"Zebra99" in p.read_bytes())]
    check(not holding, f"files holding the password: {holding}")


def calibrate_writes(root: Path) -> None:
    """`calibrate binoculars` into a config that sets the table by dotted keys, with a `--human` file
    named outside the BMP: the file it writes is one every command reads."""
    import polars as pl

    config = root / "pipelines.toml"
    config.write_text('[paths]\ndata_dir = "data"\ndatabase = "data/r.duckdb"\n\n[score]\nreference_flags.enabled = true\n'
                      "[pipelines.p]\nvenues = ['V/2025/C']\nstages = ['curate']\n")
    human = root / "human-\U0001F600.parquet"
    pl.DataFrame({"binoculars": [float(v) / 100 for v in range(50, 150)]}).write_parquet(human)
    pl.DataFrame({"binoculars": [0.3, 0.4, 0.52, 0.9]}).write_csv(root / "ai.csv")
    done = cli(["calibrate", "binoculars", "--human", str(human), "--ai", str(root / "ai.csv"), "--fpr", "0.02",
                "-c", str(config)], root)
    check(done.returncode == 0, f"calibrate: exit {done.returncode}: {done.stderr[-300:]}")
    again = cli(["pipelines", "-c", str(config)], root)
    check(again.returncode == 0, f"the written config does not load: {again.stderr[-300:]}")


def bounded_downloads(root: Path) -> None:
    """`reproduce gem-table3 --source URL` against a server that cuts its body or declares 40 GB: one
    line each, nothing left in the download cache; a trickling server is cut off at the time bound."""
    from tasks.report import gem_table3
    from tasks.testing.local_http import body_server, trickling_server

    config = root / "pipelines.toml"
    config.write_text('[paths]\ndata_dir = "data"\ndatabase = "data/r.duckdb"\n')
    for declared, needle in ((10_000, "cut short"), (40 << 30, "more than the")):
        with body_server(b"PK\x03\x04" + bytes(100), declared=declared) as url:
            one_error_line(cli(["reproduce", "gem-table3", "--source", f"{url}/b.xlsx", "-c", str(config)], root),
                           2, needle)
    check(not [p for p in (root / "data").rglob("*") if p.is_file()], "a file was left in the download cache")
    with trickling_server(interval=0.3) as url:
        started = time.monotonic()
        try:
            gem_table3.source_file(f"{url}/b.xlsx", root / "cache", timeout_s=2.0)
        except gem_table3.SourceError as error:
            check("not downloaded within 2 s" in str(error), str(error))
        else:
            check(False, "a trickle was read as a workbook")
        check(time.monotonic() - started < 10, f"the trickle ran {time.monotonic() - started:.0f} s")


def settings_bounds(root: Path) -> None:
    """Negative and huge seeds, negative, huge or all-zero judge weights, TOML nested 100,000 deep, a
    5,000-digit integer: one line each when the config loads; an absolute database template is found."""
    pipeline = "[pipelines.p]\nvenues = ['V/2025/C']\nstages = ['curate']\n"
    for text, needle in (("[validate]\nseed = -1\n", "validate.seed"), ("[curate]\nseed = 4294967296\n", "curate.seed"),
                         ("[score]\nnegatives_seed = -1\n", "negatives_seed"),
                         ("[score]\njudge_weights = { 'a/x' = -0.9 }\n", "judge_weights"),
                         ("[score]\njudge_weights = { 'a/x' = 1e308, 'b/y' = 1e308 }\n", "judge_weights"),
                         ("[score]\njudge_weights = { 'a/x' = 0.0 }\n", "every weight is 0"),
                         ("[curate]\nx = " + "[" * 100_000 + "]" * 100_000 + "\n", "nested more than"),
                         ("[curate]\nx = " + "{a = " * 100_000 + "1" + "}" * 100_000 + "\n", "nested more than"),
                         ("[curate]\nseed = 1" + "0" * 5000 + "\n", "more than 64 digits")):
        (root / "pipelines.toml").write_text(text + pipeline)
        one_error_line(cli(["pipelines", "-c", str(root / "pipelines.toml")], root), 2, needle)
    (root / "pipelines.toml").write_text(f"[paths]\ndatabase = '{root}/srv/{{pipeline}}/grebench.duckdb'\n" + pipeline)
    for command in (["report"], ["site"], ["plan", "--gap", "0.5"]):
        one_error_line(cli([*command, "-c", str(root / "pipelines.toml")], root), 2, "no results database yet")


def wrong_kind_columns(root: Path) -> None:
    """A curated `rating` as text, `rows_in` as text, `paper_id` as a list: materialize names the file in
    one line; a `--release` file whose ids are lists is one line too."""
    import polars as pl

    from tasks.core.damage import DamagedFileError
    from tasks.stages.materialize.build import build_database
    from tests.stages.materialize.test_materialize import make_config, write_outputs

    for name, column, value in (("reviews.parquet", "rating", pl.lit("six")),
                                ("curation_report.parquet", "rows_in", pl.lit("4")),
                                ("papers.parquet", "paper_id", pl.concat_list(pl.col("paper_id")))):
        project = root / name.split(".")[0]
        project.mkdir()
        cfg = make_config(project)
        write_outputs(cfg)
        path = cfg.data_dir / "t" / "venue" / "curate" / name
        pl.read_parquet(path).with_columns(value.alias(column)).write_parquet(path)
        try:
            build_database(cfg, "t")
        except DamagedFileError as error:
            check(f"column '{column}' holds" in str(error) and name in str(error) and "\n" not in str(error),
                  str(error))
        else:
            check(False, f"{name} with {column} of the wrong kind was built")
    release = root / "release1.parquet"
    pl.DataFrame({"forum": [["p0"], ["p1"]], "review": ["a", "b"]}).write_parquet(release)
    (root / "g.toml").write_text('[paths]\ndata_dir = "data"\ndatabase = "data/r.duckdb"\n')
    one_error_line(cli(["reproduce", "gem-table2", "--release", str(release), "--metric", "bleu", "-c",
                        str(root / "g.toml")], root), 2, "not one id a row")


def hostile_workbooks(root: Path) -> None:
    """Workbooks with nan, text, TRUE or 5,000 digits in a score cell, malformed XML, DOCTYPE entities, a
    benchmark named `score`, a model named twice: one line each; a sheet declaring A1:XFD1048576 with
    one far row is read in seconds."""
    from tasks.report import gem_table3
    from tests.report.test_gem_table3 import HOSTILE_BOOKS, rewrite_sheet, write_book

    config = root / "pipelines.toml"
    config.write_text('[paths]\ndata_dir = "data"\ndatabase = "data/r.duckdb"\n')
    for case, (change, needle) in HOSTILE_BOOKS.items():
        book = rewrite_sheet(write_book(root / f"{case}.xlsx"), change)
        one_error_line(cli(["reproduce", "gem-table3", "--source", str(book), "-c", str(config)], root), 2, needle)
    far = '<row r="1048576"><c r="A1048576" t="inlineStr"><is><t>far/model</t></is></c></row>'
    book = rewrite_sheet(write_book(root / "far.xlsx"), lambda x: x.replace("</sheetData>", far + "</sheetData>")
                         .replace('<dimension ref="A1:G12"/>', '<dimension ref="A1:XFD1048576"/>'))
    started = time.monotonic()
    rows = gem_table3.read_workbook(book)
    check(rows.height == 12 and time.monotonic() - started < 30, f"{rows.height} rows in {time.monotonic() - started:.0f} s")


def hidden_by_matrix_and_shapes(root: Path) -> None:
    """Text flattened by its text matrix, under a white pentagon or an opaque white image with alpha:
    listed and stripped; text seen through a faint white film kept."""
    import pymupdf

    from tasks.stages.ingest.pdf import extract_text
    from tests.stages.ingest.test_pdf_hidden import MATRIX_AND_SHAPES, pdf, plant_by_matrix_and_shapes

    doc = pymupdf.open("pdf", pdf())
    plant_by_matrix_and_shapes(doc, doc[0])
    found = extract_text(doc.tobytes())
    check(sorted((r, t) for _, r, t in found.hidden) == sorted(MATRIX_AND_SHAPES), f"hidden {found.hidden}")
    check(not any(t[:25] in found.text for _, t in MATRIX_AND_SHAPES), "hidden text reached the paper text")
    check("Seen through a faint white film." in found.text, "text under a see-through film was dropped")


def hidden_by_one_way_matrix(root: Path) -> None:
    """Text a text matrix flattens one way only (1 point high at 20 pt, or an em 1 point wide): listed
    and stripped, with the trace hiding nothing else on the page too; text drawn twice or half as wide kept."""
    import pymupdf

    from tasks.stages.ingest.pdf import extract_text
    from tests.stages.ingest.test_pdf_hidden import ONE_WAY, STRETCHED, pdf, plant_one_way

    for across in (True, False):
        doc = pymupdf.open("pdf", pdf())
        plant_one_way(doc, doc[0], across)
        found = extract_text(doc.tobytes())
        wanted = ONE_WAY if across else ONE_WAY[:1]
        check(sorted((r, t) for _, r, t in found.hidden) == sorted(wanted), f"hidden {found.hidden}")
        check(not any(t[:25] in found.text for _, t in ONE_WAY), "flattened text reached the paper text")
        check(all(t in found.text for t in STRETCHED), "stretched or condensed text was dropped")


def fifo_release(root: Path) -> None:
    """A FIFO named x.parquet in a `--release` folder, and one given as the file: one line, no hang."""
    import os

    (root / "release").mkdir()
    os.mkfifo(root / "release" / "x.parquet")
    os.mkfifo(root / "alone.parquet")
    (root / "g.toml").write_text('[paths]\ndata_dir = "data"\ndatabase = "data/r.duckdb"\n')
    for release in (root / "release", root / "alone.parquet"):
        one_error_line(cli(["reproduce", "gem-table2", "--release", str(release), "--metric", "bleu", "-c",
                            str(root / "g.toml")], root, timeout=120), 2, "not a regular file")


def signal_while_importing(root: Path) -> None:
    """Ctrl-C or SIGTERM 0.3 s into a command, while it imports: exit 130 / 143, one line, no traceback."""
    import signal
    import subprocess
    import sys

    from soak_common import ENV

    for number, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        proc = subprocess.Popen([sys.executable, "-m", "flows.cli.main", "pipelines"], cwd=root, env=ENV, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(0.3)
        proc.send_signal(number)
        _, err = proc.communicate(timeout=30)
        check(proc.returncode == code and err.count("\n") == 1 and "Traceback" not in err,
              f"{number!r}: exit {proc.returncode}: {err[-300:]}")


HOSTILE = scenarios(
    path_like_ids, password_encodings, calibrate_writes, bounded_downloads, settings_bounds, wrong_kind_columns,
    hostile_workbooks, hidden_by_matrix_and_shapes, hidden_by_one_way_matrix, fifo_release, signal_while_importing,
)
