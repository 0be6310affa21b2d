"""Build the DuckDB results database from the Parquet outputs with the `.sql` files in `sql/`.

Layers run in order: `sql/staging/` (one file per Parquet source, read with bound parameters),
`sql/marts/` (the tables people query), then `sql/tests/` (data tests: a query that returns rows
has found a problem). Each file says what it needs in header comments:

    -- source: <glob under data/<pipeline>/> ...  staging files: the Parquet files they read (globs
                                                  separated by spaces)
    -- requires: <table>, <table>                 marts and tests: tables that must exist
    -- empty: <column> <type>, ...                staging files: the columns of an empty stand-in

A staging file whose source has no files is skipped, and so is everything that requires its
table, so the database holds what the pipeline has produced so far. A staging file that declares
`empty` columns leaves an empty stand-in table then (not counted as built), and the marts built
on it exist, empty: a table the docs query (submissions, source_limits, reference_flags, ...)
is there before anything fills it, and the leaderboard reads the reference flags where they exist.
The database is built in a scratch file unique to the process, under a lock, and swapped in only
after the data tests pass: readers never see half a build, a second build waits for the first, a
crash leaves nothing that blocks the next run (tasks/core/locks.py), and rebuilding is idempotent.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from tasks.core import damage
from tasks.core.config import Config
from tasks.core.errors import DataTestError, FatalError
from tasks.core.layout import pipeline_dir
from tasks.core.locks import (
    built_for,
    copy_database,
    discard,
    locked,
    recover_database,
    scratch_path,
    swap_database,
)
from tasks.core.schema import kind_problem
from tasks.core.summary import StageSummary
from tasks.metrics.registry import REGISTRY

SQL_DIR = Path(__file__).resolve().parents[3] / "sql"
LAYERS = ("staging", "marts")


class OtherPipelineError(FatalError):
    """The database path is shared and holds another pipeline's results: building would replace them."""


def refuse_other_pipeline(cfg: Config, pipeline: str, target: Path) -> None:
    """Stop before a shared database (no {pipeline} in paths.database) loses another pipeline's results."""
    holder = built_for(target)
    if holder is not None and holder != pipeline:
        raise OtherPipelineError(
            f"{target} holds the results of pipeline {holder!r}; building {pipeline!r} there would replace "
            "them: put {pipeline} in paths.database (e.g. data/{pipeline}/grebench.duckdb) or move the file")


@dataclass(frozen=True)
class SqlFile:
    path: Path
    text: str
    source: str | None
    requires: tuple[str, ...]
    empty: str | None = None    # the columns of the empty stand-in of a staging table without files

    @property
    def table(self) -> str:
        layer = self.path.parent.name
        return f"staging.{self.path.stem}" if layer == "staging" else self.path.stem


@dataclass
class BuildResult:
    database: Path
    tables: dict[str, int] = field(default_factory=dict)      # mart table -> rows
    staged: dict[str, int] = field(default_factory=dict)      # staging table -> rows read from Parquet
    skipped: list[str] = field(default_factory=list)
    tests_run: int = 0
    sources: dict[str, list[str]] = field(default_factory=dict)   # staging table -> the files it read

    def summary(self) -> StageSummary:
        """Staging rows read in, mart rows written out."""
        return StageSummary(sum(self.staged.values()), sum(self.tables.values()), details={
            "database": str(self.database), "tables": self.tables, "skipped": self.skipped,
            "tests_run": self.tests_run})


def read_sql_file(path: Path) -> SqlFile:
    text = path.read_text(encoding="utf-8")
    source = re.search(r"^--\s*source:\s*(\S.*?)\s*$", text, re.MULTILINE)
    requires = re.search(r"^--\s*requires:\s*(.+)$", text, re.MULTILINE)
    names = tuple(n.strip() for n in requires.group(1).split(",")) if requires else ()
    empty = re.search(r"^--\s*empty:\s*(\S.*?)\s*$", text, re.MULTILINE)
    return SqlFile(path, text, source.group(1) if source else None, names, empty.group(1) if empty else None)


def sql_files(layer: str, sql_dir: Path = SQL_DIR) -> list[SqlFile]:
    return [read_sql_file(p) for p in sorted((sql_dir / layer).glob("*.sql"))]


def _parameters(text: str, values: dict[str, object]) -> dict[str, object]:
    """The named parameters a statement uses, taken from `values`."""
    used = set(re.findall(r"\$([A-Za-z_]\w*)", text))
    missing = used - values.keys()
    if missing:
        raise KeyError(f"no value for SQL parameter(s) {sorted(missing)}")
    return {name: values[name] for name in used}


def build_database(cfg: Config, pipeline: str, sql_dir: Path = SQL_DIR) -> BuildResult:
    """(Re)build the pipeline's results database (`cfg.database_for(pipeline)`) from its Parquet
    outputs; run the data tests. A shared database (no {pipeline} in paths.database) that holds
    another pipeline's results is left alone: `OtherPipelineError`.

    The build runs in a scratch file unique to this process, under the database's lock, and is
    swapped in only once every data test has passed (tasks/core/locks.py).
    """
    base = pipeline_dir(cfg, pipeline)
    target = cfg.database_for(pipeline)
    target.parent.mkdir(parents=True, exist_ok=True)
    result = BuildResult(database=target)
    params = _base_parameters(cfg, pipeline)
    with locked(target):
        recover_database(target)
        if not cfg.per_pipeline_database:
            refuse_other_pipeline(cfg, pipeline, target)
        scratch = scratch_path(target)
        try:
            with duckdb.connect(str(scratch)) as con:
                present = _run_layers(con, base, params, sql_dir, result)
                con.execute(
                    "CREATE OR REPLACE TABLE _build AS SELECT $pipeline AS pipeline, now() AS built_at",
                    {"pipeline": pipeline},
                )
                failures = run_data_tests(con, present, params, sql_dir, result.sources)
                result.tests_run = sum(1 for t in sql_files("tests", sql_dir) if set(t.requires) <= present)
                con.execute("CHECKPOINT")
            _swap_in_if_passed(failures, scratch, target)
        finally:
            discard(scratch)
    return result


def _swap_in_if_passed(failures: list[str], scratch: Path, target: Path) -> None:
    """The scratch database (closed) replaces the target when every data test passed."""
    if failures:
        raise DataTestError("data tests failed:\n" + "\n".join(failures))
    swap_database(scratch, target)


def _base_parameters(cfg: Config, pipeline: str) -> dict[str, object]:
    return {"scale": list(cfg.curate.common_scale), "pipeline": pipeline, **_metric_parameters(cfg),
            # the overview (sql/marts/overview.sql): its columns, and the level whose tests vouch for a board
            # (the first the pipeline validates at)
            "headline_metrics": list(cfg.score.headline), "board_level": cfg.validate.level[0]}


def _metric_parameters(cfg: Config) -> dict[str, list[str]]:
    """The registry and what the pipeline asks of it, for `metric_coverage` (sql/marts)."""
    asked: dict[str, str] = {}
    for where, names in (("score.metrics", cfg.score.metrics), ("score.baselines", cfg.score.baselines),
                         ("validate.metrics", cfg.validate.metrics)):
        for name in names:
            asked[name] = f"{asked[name]}, {where}" if name in asked else where
    metrics = list(REGISTRY.values())
    return {"registry_metrics": [m.name for m in metrics], "registry_families": [m.needs.name for m in metrics],
            "registry_descriptions": [m.description for m in metrics],
            "reference_free_metrics": [m.name for m in metrics if not m.reads_references],
            "negative_metrics": [m.name for m in metrics if m.negatives],
            "asked_metrics": list(asked), "asked_as": list(asked.values())}


def _run_layers(
    con: duckdb.DuckDBPyConnection,
    base: Path,
    params: dict[str, object],
    sql_dir: Path,
    result: BuildResult,
    only: set[str] | None = None,
) -> set[str]:
    """Run staging then marts (restricted to `only` when given); return the tables built."""
    con.execute("CREATE SCHEMA IF NOT EXISTS staging")
    present: set[str] = set() if only is None else _existing_tables(con)
    standing_in: set[str] = set()   # empty stand-ins, and the tables built on one: there, but not counted
    sources = result.sources
    for layer in LAYERS:
        for sql in sql_files(layer, sql_dir):
            if only is not None and sql.table not in only:
                continue
            if sql.source:
                files = sorted({str(p) for pattern in sql.source.split() for p in base.glob(pattern)
                                # never a hidden scratch file / folder; `**` does not enter the links of
                                # submit/<name>, so a source names them too (a file matched twice counts once)
                                if not any(part.startswith(".") for part in p.relative_to(base).parts)})
                if not files:
                    result.skipped.append(sql.table)
                    if sql.empty:   # an empty stand-in: the marts that read it exist, empty (docs query them)
                        con.execute(f"CREATE OR REPLACE TABLE {sql.table} ({sql.empty})")
                        present.add(sql.table)
                        standing_in.add(sql.table)
                    continue
                params["files"] = sources[sql.table] = files
            if not set(sql.requires) <= present:
                result.skipped.append(sql.table)
                continue
            if sql.source:
                _stage_from_files(con, sql, params)
            else:
                try:
                    con.execute(sql.text, _parameters(sql.text, params))
                except duckdb.BinderException as error:
                    _blame_a_source(error, _feeding(sql.requires, sources, sql_dir))
                    raise
            present.add(sql.table)
            if set(sql.requires) & standing_in:
                standing_in.add(sql.table)
                continue
            counts = result.tables if layer == "marts" else result.staged
            name = ".".join(f'"{part}"' for part in sql.table.split("."))
            counts[sql.table] = con.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
    return present


def _stage_from_files(con: duckdb.DuckDBPyConnection, sql: SqlFile, params: dict[str, object]) -> None:
    """Run a staging file over its Parquet sources; a source DuckDB cannot read (cut short, not
    Parquet, without a column the SQL reads) is one `DamagedFileError` naming it."""
    files: list[str] = list(params["files"])   # type: ignore[arg-type]
    _check_kinds(files)
    unreadable = None
    try:
        con.execute(sql.text, _parameters(sql.text, params))
        return
    except duckdb.Error as error:
        if any(words in str(error) for words in damage.SITUATIONS) or isinstance(error, duckdb.InterruptException):
            raise
        for name in files:
            try:
                con.execute("SELECT count(*) FROM parquet_metadata(?)", [name]).fetchone()
            except duckdb.Error:
                unreadable = name
                break
        what = str(error).strip().splitlines()[0][:300]
    where = unreadable or (files[0] if len(files) == 1 else f"{len(files)} files of {sql.source} (e.g. {files[0]})")
    raise damage.damaged(where, f"the {sql.table} table cannot be built from it: {what}")


def _check_kinds(files: Sequence[str]) -> None:
    """A `DamagedFileError` naming the first source file with a column of another kind than the
    project writes (tasks/core/schema.py `kind_problem`): DuckDB would fail on it with a Binder or
    Conversion error somewhere in the marts, or worse, read it."""
    import polars as pl

    for name in files:
        with damage.reading(name):
            problem = kind_problem(pl.read_parquet_schema(name))
        if problem is not None:
            raise damage.damaged(name, problem)


def _feeding(tables: Sequence[str], sources: dict[str, list[str]], sql_dir: Path) -> list[str]:
    """The source files of the staging tables `tables` are built from, through the marts between."""
    requires = {sql.table: sql.requires for layer in LAYERS for sql in sql_files(layer, sql_dir)}
    seen: set[str] = set()
    todo = list(tables)
    while todo:
        table = todo.pop()
        if table not in seen:
            seen.add(table)
            todo += requires.get(table, ())
    return [f for table in sorted(seen) for f in sources.get(table, ())]


def _blame_a_source(error: duckdb.BinderException, files: list[str]) -> None:
    """A `DamagedFileError` naming the source file that lacks the column `error` says is missing
    (a staging view reads `*`, so a Parquet output without a column fails only where it is used)."""
    import polars as pl

    found = re.search(r'column "([^"]+)" not found', str(error))
    for name in files if found else ():
        with damage.reading(name):
            schema = pl.read_parquet_schema(name)
        if found.group(1) not in schema:
            raise damage.damaged(name, f"no column {found.group(1)!r}") from None


def _existing_tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    rows = con.execute("SELECT schema_name, table_name FROM duckdb_tables()").fetchall()
    return {name if schema == "main" else f"{schema}.{name}" for schema, name in rows}


def update_tables(cfg: Config, pipeline: str, tables: set[str], sql_dir: Path = SQL_DIR) -> BuildResult:
    """Rebuild only `tables` of the database (e.g. `runs` after a run ends): on a copy, tested, swapped in."""
    target = cfg.database_for(pipeline)
    result = BuildResult(database=target)
    if not target.is_file():
        return result
    with locked(target):
        recover_database(target)
        if not target.is_file():
            return result
        scratch = scratch_path(target)
        try:
            copy_database(target, scratch)
            params = _base_parameters(cfg, pipeline)
            with duckdb.connect(str(scratch)) as con:
                holder = con.execute("SELECT any_value(pipeline) FROM _build").fetchone()[0]
                if holder != pipeline:
                    return result
                present = _run_layers(con, pipeline_dir(cfg, pipeline), params, sql_dir, result, tables)
                failures = run_data_tests(con, present, params, sql_dir, result.sources)
                con.execute("CHECKPOINT")
            _swap_in_if_passed(failures, scratch, target)
        finally:
            discard(scratch)
    return result


def run_data_tests(
    con: duckdb.DuckDBPyConnection, present: set[str], params: dict[str, object], sql_dir: Path = SQL_DIR,
    sources: dict[str, list[str]] | None = None,
) -> list[str]:
    """Run every applicable data test; return one line per failing test with example rows. A test
    that reads a column a source file lacks names that file (`DamagedFileError`)."""
    failures = []
    for test in sql_files("tests", sql_dir):
        if not set(test.requires) <= present:
            continue
        try:
            rows = con.execute(test.text, _parameters(test.text, params)).fetchmany(5)
        except duckdb.BinderException as error:
            _blame_a_source(error, _feeding(test.requires, sources or {}, sql_dir))
            raise
        if rows:
            failures.append(f"  {test.path.stem}: e.g. {rows}")
    return failures


