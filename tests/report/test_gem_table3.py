"""`grebench reproduce gem-table3`: Spearman of GEM / GEM-S with other benchmarks beside the paper's Table 3,
on a workbook the test writes in the shape of the GEM repository's GRE-bench.xlsx."""

from __future__ import annotations

import functools
import http.server
import json
import math
import threading
import time

import openpyxl
import pytest
from scipy.stats import spearmanr
from typer.testing import CliRunner

from flows.cli.main import app
from tasks.report import gem_table3 as table3
from tasks.report.benchmarks import spearman_interval
from tasks.testing.local_http import body_server, trickling_server
from tasks.testing.pipelines import results_config

runner = CliRunner()
GEM = [40.0 + k for k in range(1, 11)]                 # ranks 1..10
MMLU = [60.0 + r for r in (6, 2, 7, 1, 4, 5, 3, 10, 8, 9)]   # sum of squared rank differences 74: rho 0.5515
GEM_S = [10.0 + r for r in (1, 3, 2, 4, 6, 5, 8, 7, 10, 9)]
GPQA = [30.0, None, 31.0, 35.0, None, 33.0, 36.0, 40.0, 38.0, 41.0]   # empty cells: n = 8


def write_book(path, header=("model_name", "parameter_size", "GEM", "GEM-S", "MMLU", "GPQA", "HumanEval")):
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.append(list(header))
    for k in range(10):
        family = ("acme", "zeta")[k % 2]
        row = [f"{family}/model-{k}", float(10 ** (9 + k % 3)), GEM[k], GEM_S[k], MMLU[k], GPQA[k], 100 - GEM[k]]
        sheet.append(row[: len(header)] if k != 9 else [*row[:5]])   # a short last row: GPQA, HumanEval empty
    sheet.append(["acme/no-benchmarks", 5e9, 44.0, 12.0])                  # GEM only, as o1 in the real file
    book.save(path)
    return path


@pytest.fixture
def config(tmp_path):
    return results_config(tmp_path / "pipelines.toml")


def test_the_interval_is_fisher_z_with_the_bonett_wright_error():
    rho, low, high, reason = spearman_interval(GEM, MMLU)
    assert reason is None and rho == pytest.approx(1 - 6 * 74 / 990)
    half = 1.959964 * math.sqrt((1 + rho**2 / 2) / 7)
    assert (low, high) == pytest.approx((math.tanh(math.atanh(rho) - half), math.tanh(math.atanh(rho) + half)), abs=1e-5)
    assert spearman_interval([1, 2, 3], [1, 2, 3])[3] == "fewer_than_4_models"
    assert spearman_interval([1, 2, 3, 4], [5, 5, 5, 5])[3] == "constant_scores"
    assert spearman_interval([1, 2, 3, 4, 5], [2, 4, 6, 8, 10])[:3] == (1.0, 1.0, 1.0)
    # pairs with a missing side are left out, not counted
    assert spearman_interval([1, 2, 3, 4, 5, math.nan], [1, 2, 4, 3, 5, 9])[0] == pytest.approx(0.9)


def test_the_papers_table3_is_transcribed_row_by_row():
    assert table3.TABLE3["GEM"][table3.BENCHMARKS.index("HellaSwag")] == 0.74
    assert table3.TABLE3["GEM-S (abstract)"][table3.BENCHMARKS.index("GSM8K")] == 0.73
    assert table3.TABLE3["GEM-S (ASSW)"][table3.BENCHMARKS.index("GPQA")] == 0.71
    assert all(len(row) == 7 for row in table3.TABLE3.values()) and len(table3.TABLE7) == table3.PAPER_MODELS


def test_reproduce_prints_each_cell_beside_the_paper(tmp_path, config):
    book = write_book(tmp_path / "GRE-bench.xlsx")
    out = tmp_path / "report"
    args = ["reproduce", "gem-table3", "--source", str(book), "--out-dir", str(out), "--config", str(config)]
    rows = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert [(r["metric"], r["benchmark"]) for r in rows] == [(m, b) for m in ("GEM", "GEM-S")
                                                             for b in ("MMLU", "GPQA", "HumanEval")]
    cell = {(r["metric"], r["benchmark"]): r for r in rows}
    mmlu = cell["GEM", "MMLU"]
    assert mmlu["n"] == 10 and mmlu["paper"] == 0.55 and mmlu["agreement"] == "agrees" and mmlu["why"] is None
    assert mmlu["spearman"] == pytest.approx(spearmanr(GEM, MMLU).statistic)
    gpqa = cell["GEM", "GPQA"]
    have = [k for k in range(9) if GPQA[k] is not None]
    assert gpqa["n"] == len(have) == 7
    assert gpqa["spearman"] == pytest.approx(spearmanr([GEM[k] for k in have], [GPQA[k] for k in have]).statistic)
    assert gpqa["ci_low"] < gpqa["spearman"] < gpqa["ci_high"] and gpqa["paper"] == 0.60
    assert gpqa["agreement"] == "within_interval" and gpqa["why"].startswith("n=7 (7 of the file's 11 models have GPQA")
    reversed_ = cell["GEM", "HumanEval"]   # the opposite ranking: -1, its interval far from the paper's 0.36
    assert (reversed_["spearman"], reversed_["ci_low"], reversed_["ci_high"]) == (-1.0, -1.0, -1.0)
    assert reversed_["agreement"] == "differs" and "the paper's value is outside" in reversed_["why"]
    assert cell["GEM-S", "MMLU"]["paper_row"] == "GEM-S (abstract)" and cell["GEM-S", "MMLU"]["paper"] == 0.66
    assert all("Bonett-Wright" in r["interval"] for r in rows)
    assert (out / "gem_figure5_size.png").read_bytes()[:4] == b"\x89PNG"
    text = runner.invoke(app, args)
    assert text.exit_code == 0, text.output
    assert "GEM     MMLU        10     0.55    [-0.17, 0.89]   0.55  agrees\nGEM     GPQA" in text.stdout
    assert "for 0 of the 0 Table 7 models it names" in text.stdout
    # a reason several cells share is said once under the table, each of its rows marked
    assert text.stdout.count(table3.UNKNOWN_N) == 1 and gpqa["note"] == table3.UNKNOWN_N
    assert "GEM     GPQA         7" in text.stdout and "within_interval [1]" in text.stdout
    assert text.stdout.count("not in the paper's Table 3") <= 1


def test_a_url_source_is_fetched_once_into_the_download_cache(tmp_path, config):
    served = tmp_path / "served"
    served.mkdir()
    write_book(served / "GRE-bench.xlsx")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/GRE-bench.xlsx"
    args = ["reproduce", "gem-table3", "--source", url, "--json", "--config", str(config)]
    try:
        first = runner.invoke(app, args)
    finally:
        server.shutdown()
        server.server_close()
    assert first.exit_code == 0, first.output
    cached = list((tmp_path / "data" / "cache" / "downloads" / "gem-table3").glob("*GRE-bench.xlsx"))
    assert len(cached) == 1
    again = runner.invoke(app, args)   # the server is gone: the cached file answers
    assert again.exit_code == 0 and json.loads(again.stdout) == json.loads(first.stdout)


@pytest.mark.parametrize("case, message", [
    ("missing", "no such file"),
    ("text", "not an xlsx workbook"),
    ("columns", "missing column(s) parameter_size, GEM-S"),
    ("word", "is not a number"),
])
def test_bad_input_fails_with_one_error_line(tmp_path, config, case, message):
    path = tmp_path / "book.xlsx"
    if case == "text":
        path.write_text("model_name,GEM\n")
    elif case == "columns":
        write_book(path, header=("model_name", "GEM", "MMLU"))
    elif case == "word":
        book = openpyxl.Workbook()
        book.active.append(["model_name", "parameter_size", "GEM", "GEM-S", "MMLU"])
        book.active.append(["a/b", 1e9, 40.0, "high", 60.0])
        book.save(path)
    result = runner.invoke(app, ["reproduce", "gem-table3", "--source", str(path), "--config", str(config)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.output


# A download is bounded in time, in size and must be whole; each failure is one line naming the URL.
def test_a_trickling_server_is_cut_off_at_the_time_bound(tmp_path):
    with trickling_server(interval=0.3) as url:
        started = time.monotonic()
        with pytest.raises(table3.SourceError, match="not downloaded within 1 s") as raised:
            table3.source_file(f"{url}/GRE-bench.xlsx", tmp_path / "cache", timeout_s=1.0)
        assert time.monotonic() - started < 5
    assert url in str(raised.value) and "\n" not in str(raised.value)
    assert not list((tmp_path / "cache").iterdir())   # no .part left


@pytest.mark.parametrize("declared, repeat, message", [
    (40 << 30, 1, "declares 42,949,672,960 bytes, more than the 67,108,864 allowed"),   # refused before the body
    (None, 70, "more than the 67,108,864 bytes allowed"),                               # no length: cut at the bound
    (5000, 1, "the body was cut short (1,024 of 5,000 bytes came)"),
])
def test_a_huge_or_cut_body_is_one_line_and_leaves_no_file(tmp_path, declared, repeat, message):
    body = b"PK\x03\x04" + bytes(1020) if repeat == 1 else bytes(1 << 20)
    with body_server(body, declared, repeat) as url, pytest.raises(table3.SourceError) as raised:
        table3.source_file(f"{url}/GRE-bench.xlsx", tmp_path / "cache", timeout_s=30)
    assert message in str(raised.value) and "\n" not in str(raised.value), raised.value
    assert not list((tmp_path / "cache").iterdir())


def test_reproduce_with_a_cut_download_is_one_error_line(tmp_path, config):
    with body_server(b"PK\x03\x04" + bytes(100), declared=10_000) as url:
        result = runner.invoke(app, ["reproduce", "gem-table3", "--source", f"{url}/b.xlsx", "--config", str(config)])
    assert result.exit_code == 2 and result.output.startswith("error: ") and "cut short" in result.output
    assert len(result.output.splitlines()) == 1 and result.exception is None or isinstance(result.exception, SystemExit)


def rewrite_sheet(path, change):
    """The workbook at `path` with its first sheet's XML passed through `change` (a hostile file)."""
    import zipfile

    with zipfile.ZipFile(path) as book:
        parts = {name: book.read(name) for name in book.namelist()}
    parts["xl/worksheets/sheet1.xml"] = change(parts["xl/worksheets/sheet1.xml"].decode()).encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as book:
        for name, data in parts.items():
            book.writestr(name, data)
    return path


def set_cell(xml: str, ref: str, cell: str) -> str:
    """`xml` with the cell at `ref` replaced by `cell` (its whole `<c>` element)."""
    import re

    return re.sub(rf'<c r="{ref}"[^>]*?(/>|>.*?</c>)', cell, xml, count=1)


HOSTILE_BOOKS = {
    "nan": (lambda x: set_cell(x, "E2", '<c r="E2"><v>nan</v></c>'), "the first sheet cannot be read"),
    "abc": (lambda x: set_cell(x, "E2", '<c r="E2"><v>abc</v></c>'), "the first sheet cannot be read"),
    "digits": (lambda x: set_cell(x, "E2", f'<c r="E2"><v>{"7" * 5000}</v></c>'), "the first sheet cannot be read"),
    "true": (lambda x: set_cell(x, "E2", '<c r="E2" t="b"><v>1</v></c>'), "row 2 (acme/model-0), column MMLU: True "
                                                                            "is not a number"),
    "malformed": (lambda x: x[: len(x) // 2], "the first sheet cannot be read"),
    "entities": (lambda x: '<!DOCTYPE w [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;">]>' + x,
                 "not an xlsx workbook (ValueError"),
    "score_column": (lambda x: x.replace(">GPQA<", ">score<"), "may not be named 'score'"),
    "twice": (lambda x: set_cell(x, "A3", '<c r="A3" t="inlineStr"><is><t>acme/model-0</t></is></c>'),
              "row 3 names acme/model-0 again (first in row 2)"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_BOOKS))
def test_a_hostile_workbook_is_one_line_never_a_silent_answer(tmp_path, config, case):
    change, message = HOSTILE_BOOKS[case]
    path = tmp_path / "book.xlsx"
    rewrite_sheet(write_book(path), change)
    result = runner.invoke(app, ["reproduce", "gem-table3", "--source", str(path), "--config", str(config)])
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.output


def test_a_workbook_declaring_a_million_rows_reads_the_rows_it_holds(tmp_path):
    path = write_book(tmp_path / "book.xlsx")
    far = '<row r="1048576"><c r="XFD1048576" t="inlineStr"><is><t>x</t></is></c></row>'
    rewrite_sheet(path, lambda x: x.replace("</sheetData>", far + "</sheetData>").replace(
        '<dimension ref="A1:G12"/>', '<dimension ref="A1:XFD1048576"/>'))
    started = time.monotonic()
    with pytest.raises(table3.SourceError, match="row 1048576 has more than 1000 columns"):
        table3.read_workbook(path)
    assert time.monotonic() - started < 30
