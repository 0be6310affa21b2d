"""Read a user's review file (Parquet or CSV) for `grebench validate` into the workflow's REVIEWS_IN rows.

Required columns: paper_id, reviewer, review. Optional: judgments (preprocessed, one per line, used
as they are), abstract, assw, group, and a human quality score under one of QUALITY_COLUMNS. A
missing column, a column of the wrong type (a list, struct or binary review), an unreadable file
or any unusable row (an empty review, a quality that is not a finite number) is a
`ReviewsFileError` whose one-line message names them; nothing is silently dropped.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

REQUIRED = ("paper_id", "reviewer", "review")
QUALITY_COLUMNS = ("quality", "quality_score", "human_score", "human_quality")
OPTIONAL_TEXT = ("judgments", "abstract", "assw", "group")


class ReviewsFileError(ValueError):
    """The review file cannot be used; the message says why in one line."""


def _read(path: Path) -> pl.DataFrame:
    if not path.is_file():
        raise ReviewsFileError(f"{path}: file not found")
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            return pl.read_parquet(path)
        if suffix in (".csv", ".tsv"):
            return pl.read_csv(path, separator="\t" if suffix == ".tsv" else ",", infer_schema=False)
    except (pl.exceptions.PolarsError, OSError) as error:
        raise ReviewsFileError(f"{path}: cannot read the file: {str(error).splitlines()[0]}") from None
    raise ReviewsFileError(f"{path}: unsupported file type {suffix or '(none)'}; use .parquet or .csv")


def _texty(dtype: pl.DataType) -> bool:
    """Whether a column of this type reads as text cell by cell: no lists, structs, binary or objects."""
    return not (dtype.is_nested() or dtype == pl.Binary or isinstance(dtype, pl.Object))


def _rows(numbers: list[int], limit: int = 8) -> str:
    shown = ", ".join(str(n) for n in numbers[:limit])
    return shown + (f" and {len(numbers) - limit} more" if len(numbers) > limit else "")


def load_reviews_file(path: Path | str) -> pl.DataFrame:
    """REVIEWS_IN-shaped rows (review_id = "<paper_id>/<reviewer>"); a ReviewsFileError on any problem.

    Rows are numbered from 1 in error messages, as a spreadsheet would show them after the header.
    """
    path = Path(path)
    raw = _read(path)
    missing = [c for c in REQUIRED if c not in raw.columns]
    if missing:
        raise ReviewsFileError(f"{path}: missing required column(s) {', '.join(missing)} "
                               f"(found: {', '.join(raw.columns) or 'none'})")
    quality = next((c for c in QUALITY_COLUMNS if c in raw.columns), None)
    wrong = [f"{c} is {raw.schema[c]}" for c in (*REQUIRED, *OPTIONAL_TEXT) if c in raw.columns
             and not _texty(raw.schema[c])]
    if quality and not _texty(raw.schema[quality]) and not raw.schema[quality].is_numeric():
        wrong.append(f"{quality} is {raw.schema[quality]}")
    if wrong:
        raise ReviewsFileError(f"{path}: wrong column type(s): {'; '.join(wrong)} (text columns must hold "
                               "strings, numbers or dates; the quality column numbers)")
    text = [pl.col(c).cast(pl.String).str.strip_chars() for c in (*REQUIRED, *OPTIONAL_TEXT) if c in raw.columns]
    frame = raw.select(*text, *([pl.col(quality)] if quality else [])).with_row_index("row", offset=1)
    if quality:
        values = frame[quality].cast(pl.String).str.strip_chars()
        numbers = values.cast(pl.Float64, strict=False)
        bad = frame.filter(values.is_not_null() & (values != "") & numbers.is_null())["row"].to_list()
        if bad:
            raise ReviewsFileError(f"{path}: column {quality} is not numeric in row(s) {_rows(bad)}")
        # nan / inf parse as floats, but a correlation over them means nothing: refused by row
        infinite = frame.filter(numbers.is_not_null() & ~numbers.is_finite())["row"].to_list()
        if infinite:
            raise ReviewsFileError(f"{path}: column {quality} is not a finite number (nan or inf) in row(s) "
                                   f"{_rows(infinite)}; leave the cell empty when there is no score")
        frame = frame.with_columns(numbers.alias("quality"))
    problems = []
    for column in (*REQUIRED, *(("judgments",) if "judgments" in frame.columns else ())):
        empty = frame.filter(pl.col(column).is_null() | (pl.col(column) == ""))["row"].to_list()
        if empty:
            problems.append(f"empty {column} in row(s) {_rows(empty)}")
    dup = frame.filter(pl.struct("paper_id", "reviewer").is_duplicated() & pl.col("reviewer").is_not_null())
    if dup.height:
        problems.append(f"paper_id and reviewer repeat in row(s) {_rows(dup['row'].to_list())}")
    if problems:
        raise ReviewsFileError(f"{path}: unusable rows: {'; '.join(problems)}")
    if frame.is_empty():
        raise ReviewsFileError(f"{path}: the file has no rows")
    return frame.select(
        "paper_id", pl.concat_str("paper_id", "reviewer", separator="/").alias("review_id"),
        pl.col("review").alias("review_text"),
        *(pl.col(c) for c in (*OPTIONAL_TEXT, "quality") if c in frame.columns),
    )
