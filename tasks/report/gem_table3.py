"""GEM's Table 3 reproduced: GRE-bench's rank agreement with other benchmarks, from the GEM repository's file.

The GEM paper (paper 000, section 5, "GRE-bench vs. Other benchmarks", Table 3) reports Spearman's
correlation between the GRE-bench scores of its candidate models and their scores on seven popular
benchmarks, and draws the scores against parameter size per family (Figure 5). The GEM repository
ships `GRE-bench.xlsx`: one row per model (`model_name`, `parameter_size` in parameters, `GEM`,
`GEM-S`, then MMLU, ARC-C, HellaSwag, GSM8K, MATH, HumanEval, GPQA; a model without a benchmark's
score has an empty cell). Its GEM and GEM-S columns are the paper's appendix A.3 Table 7 (the
Llama-3.1 8B evaluation LM; GEM-S conditioned on the abstract) to two decimals, which `table7_match`
checks, so the file's GEM-S is set beside Table 3's "GEM-S (abstract)" row. The paper does not say
how many models each of its cells ranks, nor which evaluation LM's scores it correlates (its main
results, Table 6, use Llama-3.1 70B); the file has 20 models where Tables 6 and 7 have 18.

* `source_file`: a local path as it is, or a URL fetched once into the download cache;
* `read_workbook`: the first sheet as (model, parameter_size, metric scores, benchmark scores), checked;
* `side_by_side`: per (metric, benchmark) the project's Spearman with n and its interval, the paper's
  value, and whether they agree (`agreement`: "agrees" when the project's rho rounds to the paper's
  two decimals, "within_interval" when the paper's value lies in the project's 95% interval, else
  "differs"), with `why` where they do not agree and `note` for what every such cell shares (said once
  under the table by `render`, not under each row).
"""

from __future__ import annotations

import hashlib
import math
import zipfile
from collections import Counter
from pathlib import Path

import polars as pl

from tasks.report.benchmarks import INTERVAL, correlations, family
from tasks.report.common import download_once

SOURCE_URL = ("https://github.com/yx-lu/Benchmarking-LLMs--Judgments-with-No-Gold-Standard/raw/main/"
              "GRE-bench.xlsx")
MODEL, SIZE = "model_name", "parameter_size"
METRICS = {"GEM": "GEM", "GEM-S": "GEM-S (abstract)"}   # the file's column -> the paper's Table 3 row
PAPER_MODELS = 18   # models in the paper's Tables 6 and 7

# GEM paper section 5, Table 3 (Spearman's correlation of GRE-bench with each benchmark), two decimals
BENCHMARKS = ("MMLU", "ARC-C", "HellaSwag", "GSM8K", "MATH", "HumanEval", "GPQA")
TABLE3 = {"GEM": (0.55, 0.68, 0.74, 0.58, 0.37, 0.36, 0.60),
          "GEM-S (abstract)": (0.66, 0.70, 0.82, 0.73, 0.43, 0.43, 0.67),
          "GEM-S (ASSW)": (0.68, 0.78, 0.84, 0.73, 0.43, 0.48, 0.71)}

# GEM paper appendix A.3, Table 7 (evaluation LM Llama-3.1 8B): GEM and GEM-S (abstract) per model, under
# the names the repository's file uses
TABLE7 = {"openai/gpt-4o-mini": (42.55, 14.44), "openai/gpt-4o": (48.01, 18.73),
          "openai/gpt-3.5-turbo-0125": (45.62, 15.86), "anthropic/claude-2": (55.94, 24.29),
          "anthropic/claude-3-haiku": (49.77, 19.58), "anthropic/claude-3-sonnet": (56.49, 24.16),
          "anthropic/claude-3-opus": (60.94, 27.94), "google/gemini-pro": (40.65, 12.86),
          "google/gemini-pro-1.5": (52.94, 22.43), "meta-llama/llama-3-8b-instruct": (43.50, 15.49),
          "meta-llama/llama-3-70b-instruct": (46.39, 18.60), "mistralai/mixtral-8x7b-instruct": (45.18, 15.61),
          "mistralai/mixtral-8x22b-instruct": (47.29, 17.03), "meta-llama/llama-3.1-8b-instruct": (46.51, 18.33),
          "meta-llama/llama-3.1-70b-instruct": (48.29, 19.59), "mistralai/mistral-large": (47.84, 17.84),
          "mistralai/mistral-small": (45.01, 15.90), "mistralai/mistral-tiny": (43.90, 13.34)}


MAX_BOOK_BYTES = 64 << 20   # a workbook larger than this is not the GEM repository's (a few kB)


class SourceError(ValueError):
    """A source that cannot be read: one line naming it and what is wrong."""


def source_file(source: str, cache: Path, timeout_s: float = 120.0) -> Path:
    """The workbook: a local path as it is, or an http(s) URL downloaded once into `cache`."""
    if source.startswith(("http://", "https://")):
        name = hashlib.sha256(source.encode()).hexdigest()[:12] + "-" + (Path(source).name or "source.xlsx")
        try:
            return download_once(source, cache / name, b"PK\x03\x04", "an xlsx file", timeout_s, MAX_BOOK_BYTES)
        except (ValueError, OSError) as error:
            raise SourceError(str(error).splitlines()[0] or type(error).__name__) from None
    path = Path(source)
    if not path.is_file():
        raise SourceError(f"{path}: no such file")
    return path


MAX_BOOK_ROWS = 10_000      # rows with a value; the GEM repository's sheet has a few dozen
MAX_BOOK_COLUMNS = 1_000
RESERVED = ("model", "metric", "benchmark", "score")   # the names side_by_side gives its own columns


def read_workbook(path: Path) -> pl.DataFrame:
    """The first sheet as columns model_name, parameter_size, GEM, GEM-S and one per benchmark (Float64,
    null where the cell is empty); SourceError when the file is no xlsx or a malformed one, lacks a
    column, names a benchmark as a column of the table, holds a non-number (TRUE, text, nan, inf)
    where a score belongs, or names one model twice.

    Read by the rows the sheet holds, not by the size it declares (`A1:XFD1048576` with one far row
    reads as one row), at most MAX_BOOK_ROWS rows with a value and MAX_BOOK_COLUMNS columns. openpyxl
    parses through defusedxml: a DOCTYPE's entities are refused."""
    rows = _sheet_rows(path)
    header = [str(v).strip() if v is not None else None for v in rows[0]]
    missing = [c for c in (MODEL, SIZE, *METRICS) if c not in header]
    if missing:
        raise SourceError(f"{path}: missing column(s) {', '.join(missing)} (found: "
                          f"{', '.join(h for h in header if h)})")
    twice = sorted({h for h in header if h and header.count(h) > 1})
    if twice:
        raise SourceError(f"{path}: column(s) {', '.join(twice)} appear more than once in the first row")
    benchmarks = [h for h in header if h and h not in (MODEL, SIZE, *METRICS)]
    if not benchmarks:
        raise SourceError(f"{path}: no benchmark column besides {MODEL}, {SIZE}, GEM and GEM-S")
    taken = [b for b in benchmarks if b.lower() in RESERVED]
    if taken:
        raise SourceError(f"{path}: a benchmark column may not be named {taken[0]!r} "
                          f"(reserved: {', '.join(RESERVED)}); rename it")
    records, first_row = [], {}
    for number, row in rows[1:]:
        cells = dict(zip(header, list(row) + [None] * (len(header) - len(row)), strict=False))
        if cells.get(MODEL) is None:
            raise SourceError(f"{path}: row {number} has scores but no {MODEL}")
        record = {MODEL: str(cells[MODEL]).strip()}
        if record[MODEL] in first_row:
            raise SourceError(f"{path}: row {number} names {record[MODEL]} again (first in row "
                              f"{first_row[record[MODEL]]}): keep one row a model")
        first_row[record[MODEL]] = number
        for column in (SIZE, *METRICS, *benchmarks):
            record[column] = _number(cells.get(column), path, number, record[MODEL], column)
        records.append(record)
    return pl.DataFrame(records, schema={MODEL: pl.String, **{c: pl.Float64 for c in (SIZE, *METRICS, *benchmarks)}})


def _number(value: object, path: Path, number: int, model: str, column: str) -> float | None:
    """A score cell as a float (None when empty): a finite int or float, never TRUE / FALSE."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        what = f"{value!r}"[:40]
        raise SourceError(f"{path}: row {number} ({model}), column {column}: {what} is not a number")
    return float(value)


def _what(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:200]}" if text else type(error).__name__


def _sheet_rows(path: Path) -> list:
    """[header, (row number, values), ...] of the first sheet's rows that hold a value (SourceError
    for a file openpyxl cannot read, an empty sheet, or more than the bounds)."""
    import openpyxl
    from openpyxl.utils.exceptions import InvalidFileException

    try:
        book = openpyxl.load_workbook(path, read_only=True, data_only=True)
    except (InvalidFileException, zipfile.BadZipFile, KeyError, OSError, ValueError, SyntaxError) as error:
        raise SourceError(f"{path}: not an xlsx workbook ({_what(error)})") from None
    rows: list = []
    try:
        sheet = book.worksheets[0]
        sheet.reset_dimensions()   # its declared size is the file's word; the rows it holds are what count
        for number, row in enumerate(sheet.iter_rows(values_only=True), start=1):
            if len(row) > MAX_BOOK_COLUMNS:
                if any(v is not None for v in row[MAX_BOOK_COLUMNS:]):
                    raise SourceError(f"{path}: row {number} has more than {MAX_BOOK_COLUMNS} columns")
                row = row[:MAX_BOOK_COLUMNS]
            if any(v is not None for v in row):
                rows.append(row if not rows else (number, row))
                if len(rows) > MAX_BOOK_ROWS + 1:
                    raise SourceError(f"{path}: more than {MAX_BOOK_ROWS:,} rows of scores")
    except (ValueError, TypeError, KeyError, IndexError, SyntaxError, zipfile.BadZipFile) as error:
        # a cell openpyxl cannot convert ("nan", "abc", 5,000 digits in a number cell), malformed XML
        # (ParseError is a SyntaxError), a DOCTYPE's entities (defusedxml: a ValueError)
        raise SourceError(f"{path}: the first sheet cannot be read ({_what(error)})") from None
    finally:
        book.close()
    if not rows:
        raise SourceError(f"{path}: the first sheet is empty")
    return rows


def benchmark_columns(book: pl.DataFrame) -> list[str]:
    return [c for c in book.columns if c not in (MODEL, SIZE, *METRICS)]


def side_by_side(book: pl.DataFrame, level: float = 0.95) -> pl.DataFrame:
    """One row per (metric, benchmark): metric, benchmark, spearman, n, ci_low, ci_high, interval, paper_row,
    paper, agreement, why."""
    scores = book.unpivot(list(METRICS), index=MODEL, variable_name="metric", value_name="score").rename({MODEL: "model"})
    bench = book.unpivot(benchmark_columns(book), index=MODEL, variable_name="benchmark",
                         value_name="score").rename({MODEL: "model"}).drop_nulls("score")
    table = correlations(scores.drop_nulls("score"), bench, level)
    have = {b: int(book[b].is_not_null().sum()) for b in benchmark_columns(book)}
    rows = []
    for row in table.iter_rows(named=True):
        paper_row = METRICS[row["metric"]]
        paper = (TABLE3[paper_row][BENCHMARKS.index(row["benchmark"])] if row["benchmark"] in BENCHMARKS else None)
        agreement, why = _agreement(row, paper, have[row["benchmark"]], book.height)
        rows.append({**row, "interval": INTERVAL, "paper_row": paper_row, "paper": paper,
                     "agreement": agreement, "why": why,
                     "note": UNKNOWN_N if agreement in ("within_interval", "differs") else None})
    return pl.DataFrame(rows, schema={**table.schema, "interval": pl.String, "paper_row": pl.String,
                                      "paper": pl.Float64, "agreement": pl.String, "why": pl.String,
                                      "note": pl.String})


# what every cell that does not round to the paper's value shares: said once under the table
UNKNOWN_N = (f"the paper does not give each cell's n (at most its {PAPER_MODELS} models), so a value that does not "
             "round to the paper's is set against the project's 95% interval instead")


def _agreement(row: dict, paper: float | None, with_score: int, models: int) -> tuple[str | None, str | None]:
    rho, low, high, n = row["spearman"], row["ci_low"], row["ci_high"], row["n"]
    if paper is None:
        return None, "not in the paper's Table 3"
    if math.isnan(rho):
        return "not_computed", row["reason"]
    if round(rho, 2) == paper:
        return "agrees", None
    inside = low <= paper <= high
    why = (f"n={n} ({with_score} of the file's {models} models have {row['benchmark']}); "
           f"the paper's value is {'inside' if inside else 'outside'} the 95% interval")
    return ("within_interval" if inside else "differs"), why


def table7_match(book: pl.DataFrame) -> tuple[int, int, list[str]]:
    """(models of the paper's Table 7 whose GEM and GEM-S in the file round to Table 7's, Table 7's models
    found in the file by name, those whose values differ as "model (file GEM/GEM-S vs Table 7's)")."""
    found = matched = 0
    differ = []
    for model, gem, gem_s in book.select(MODEL, "GEM", "GEM-S").iter_rows():
        if model in TABLE7:
            found += 1
            want = TABLE7[model]
            have = tuple(round(v, 2) if v is not None else None for v in (gem, gem_s))
            if have == want:
                matched += 1
            else:
                differ.append(f"{model} ({have[0]}/{have[1]} vs {want[0]}/{want[1]})")
    return matched, found, differ


def size_points(book: pl.DataFrame) -> pl.DataFrame:
    """model, metric, score, size, family: the points of the paper's Figure 5 from the file."""
    return (book.unpivot(list(METRICS), index=[MODEL, SIZE], variable_name="metric", value_name="score")
            .rename({MODEL: "model", SIZE: "size"}).drop_nulls("score")
            .with_columns(family=pl.col("model").map_elements(family, return_dtype=pl.String)))


def render(table: pl.DataFrame, title: str) -> str:
    """The side-by-side table as text, one line per cell; a reason that more than one row gives (a `why` or
    a `note`) is said once under the table, each row marking it [k]."""
    head = f"{'metric':<7} {'benchmark':<10} {'n':>3} {'spearman':>8} {'95% interval':>16} {'paper':>6}  agreement"
    lines = [title, head, "-" * len(head)]
    reasons = [[text for text in (r["why"], r.get("note")) if text] for r in table.iter_rows(named=True)]
    counts = Counter(text for texts in reasons for text in texts)
    shared = list(dict.fromkeys(text for texts in reasons for text in texts if counts[text] > 1))
    for r, texts in zip(table.iter_rows(named=True), reasons, strict=True):
        rho = "nan" if math.isnan(r["spearman"]) else f"{r['spearman']:.2f}"
        interval = "" if math.isnan(r["ci_low"]) else f"[{r['ci_low'] + 0.0:.2f}, {r['ci_high'] + 0.0:.2f}]"
        paper = "-" if r["paper"] is None else f"{r['paper']:.2f}"
        marks = "".join(f" [{shared.index(text) + 1}]" for text in texts if text in shared)
        lines.append(f"{r['metric']:<7} {r['benchmark']:<10} {r['n']:>3} {rho:>8} {interval:>16} {paper:>6}  "
                     f"{r['agreement'] or '-'}{marks}")
        lines += [f"{'':>8}why: {text}" for text in texts if text not in shared]
    lines += [f"[{k}] {text}" for k, text in enumerate(shared, 1)]
    return "\n".join(lines)
