"""`grebench reproduce gem-table3`: Spearman of GEM / GEM-S with other benchmarks beside the paper's Table 3,
on a workbook the test writes in the shape of the GEM repository's GRE-bench.xlsx."""

from __future__ import annotations

import functools
import http.server
import json
import math
import threading

import openpyxl
import pytest
from scipy.stats import spearmanr
from typer.testing import CliRunner

from flows.cli.main import app
from tasks.report import gem_table3 as table3
from tasks.report.benchmarks import spearman_interval

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
    path = tmp_path / "pipelines.toml"
    path.write_text('[paths]\ndata_dir = "data"\ndatabase = "data/r.duckdb"\n')
    return path


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
