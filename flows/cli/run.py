"""What `grebench run` prints for a person at the end: a table per stage (rows in / out, time, LLM
calls, cost), where the outputs are, and the next commands to try. `--json` prints the summaries
as JSON instead, for machines."""

from __future__ import annotations

import os
import shlex
import threading
from collections.abc import Mapping, Sequence
from contextlib import suppress
from pathlib import Path

import polars as pl

from tasks.core import damage
from tasks.core.config import CONFIGURED_STAGES, Config
from tasks.core.layout import slug
from tasks.core.summary import StageSummary
from tasks.lm import local_spec, runs_locally
from tasks.lm.loading import load_model

# Stages that write per venue; the others write data/<pipeline>/<stage>/ (tasks/core/layout.py).
PER_VENUE = ("ingest", "curate")
OUTPUT_STAGES = CONFIGURED_STAGES   # the stages that write Parquet outputs (materialize writes the database)


def preload_first_local_model(cfg: Config, stages: Sequence[str]) -> threading.Thread | None:
    """The preprocess stage's local model (weights and tokenizer) loading in a daemon thread from now,
    where the run has that stage and it runs locally. `load_model` keeps it for the process and makes
    a second caller wait for the first load, so the stage finds it loaded or loading. `grebench run`
    starts it while Prefect's server starts (idle time for this process). A load that fails here
    fails again, with its one-line error, when the stage loads the model."""
    if "preprocess" not in stages or not runs_locally(cfg.preprocess):
        return None
    spec = local_spec(cfg.preprocess)

    def load() -> None:
        with suppress(Exception):
            load_model(spec)

    thread = threading.Thread(target=load, name="preload-model", daemon=True)
    thread.start()
    return thread


def latest_run(cfg: Config, pipeline: str) -> pl.DataFrame:
    """The newest run record of `pipeline` (one row per stage), or an empty frame."""
    files = sorted((cfg.data_dir / pipeline / "runs").glob("*.parquet"), key=lambda p: p.stat().st_mtime)
    return damage.read_parquet(files[-1]) if files else pl.DataFrame()


def _shown(path: Path) -> str:
    """A path as a person would type it: relative to the working directory when it is below it."""
    try:
        return os.path.relpath(path) if Path(path).resolve().is_relative_to(Path.cwd()) else str(path)
    except ValueError:
        return str(path)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, rest = divmod(round(seconds, 1), 60)   # rounded first: 1679.96 s is 28m00.0s, not 27m60.0s
    return f"{int(minutes)}m{rest:04.1f}s" if minutes else f"{rest:.1f}s"


def stage_table(summary: Mapping[str, StageSummary], run: pl.DataFrame) -> str:
    times = dict(zip(run["stage"].to_list(), run["duration_s"].to_list(), strict=True)) if run.height else {}
    header = ["stage", "rows in", "rows out", "time", "LLM calls", "tokens in/out", "cost ($)"]
    lines = [[stage, f"{s.rows_in:,}", f"{s.rows_out:,}", _duration(times.get(stage)), f"{s.llm_calls:,}",
              f"{s.input_tokens:,}/{s.output_tokens:,}", f"{s.cost_usd:.4f}"] for stage, s in summary.items()]
    if len(summary) > 1:
        total = sum(summary.values(), StageSummary(0, 0))
        known = [t for t in times.values() if t is not None]
        lines.append(["total", "", "", _duration(sum(known)) if known else "-", f"{total.llm_calls:,}",
                      f"{total.input_tokens:,}/{total.output_tokens:,}", f"{total.cost_usd:.4f}"])
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]

    def line(row: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths,
                                                                                           strict=True)))

    rule = "  ".join("-" * w for w in widths)
    body = [line(r) for r in lines]
    if len(summary) > 1:
        body.insert(-1, rule)
    return "\n".join([line(header), rule, *body])


LEVEL_WORDS = {"judgments": "judgment level: the lines perturbed",
               "raw": "raw level: the review perturbed, then preprocessed"}


def _data_words(data: tuple | None) -> str:
    """' on <what the verdicts are about>' from the validation_data row, e.g. ' on 30 papers of real ICLR
    2023 reviews (GEM release sample) (one candidate a paper; raw level: the review perturbed, then
    preprocessed; lines by ...)'."""
    if data is None:
        return ""
    label, papers, candidates, levels, judgments_by = (*data, None)[:5]
    levels = ", ".join(LEVEL_WORDS.get(level.strip(), level.strip()) for level in (levels or "").split(",") if level)
    who = "one candidate a paper" if candidates == "one" else "every review a candidate in turn"
    lines = f"; lines by {judgments_by}" if judgments_by else ""
    return f" on {papers} papers of {label} ({who}; {levels}{lines})"


def findings(database: Path, first_metric: str | None) -> str | None:
    """One line of what the run found, read from its database: on which data (validation_data) how many
    validation tests each metric passed (and which it failed), then on the board of `first_metric` the best model and whether the
    paired comparison separates it from the next one. None where the database has neither table."""
    import duckdb

    if not database.is_file():
        return None
    with duckdb.connect(str(database), read_only=True) as con:
        tables = {row[0] for row in con.execute("select table_name from information_schema.tables").fetchall()}
        data = con.execute("select label, papers_validated, candidates, levels, judgments_by from validation_data limit 1"
                           ).fetchone() if "validation_data" in tables else None
        tests = con.execute("select metric, count(*), count(*) filter (where verdict = 'pass'), "
                            "list(strategy order by strategy) filter (where verdict = 'fail'), "
                            "count(*) filter (where verdict = 'inconclusive') from validation group by metric "
                            "order by min(rowid)").fetchall() if "validation" in tables else []
        board = con.execute("select model, mean, eval_lm from leaderboard where metric = ? and not is_human "
                            "order by eval_lm, rank limit 2", [first_metric]).fetchall() \
            if "leaderboard" in tables and first_metric else []
        pair = con.execute("select significant, p_adjusted from comparisons where metric = ? and eval_lm = ? and "
                           "((model_a = ? and model_b = ?) or (model_a = ? and model_b = ?))",
                           [first_metric, board[0][2], board[0][0], board[1][0], board[1][0], board[0][0]]
                           ).fetchone() if len(board) == 2 and "comparisons" in tables else None
    parts = []
    if tests:
        said = []
        for metric, n, passed, failed, open_ in tests:
            text = f"{metric} {passed}/{n}"
            if failed:
                text += f" (fails {', '.join(failed)})"
            if open_:
                text += f" ({open_} inconclusive)"
            said.append(text)
        parts.append(f"validation{_data_words(data)} tests passed: " + "; ".join(said))
    if board:
        (top, mean, _), rest = board[0], board[1:]
        text = f"top model on {first_metric}: {top} ({mean:.3g})"
        if rest and pair is not None:
            verdict = "separated from" if pair[0] else "not separated from"
            text += f", {verdict} {rest[0][0]} (adjusted p {pair[1]:.2g})"
        parts.append(text)
    return "found: " + "; ".join(parts) if parts else None


def run_summary(cfg: Config, pipeline: str, summary: Mapping[str, StageSummary]) -> str:
    """The whole end-of-run text."""
    run = latest_run(cfg, pipeline)
    head = f"pipeline {pipeline}: {len(summary)} stage(s) completed"
    if run.height:
        first = run.row(0, named=True)
        head += f" (run {first['run_id']}, config {first['config_hash']}, code {first['code_version']})"
    out = [head, "", stage_table(summary, run), ""]
    if "materialize" in summary:
        found = findings(cfg.database, (cfg.score.metrics or (None,))[0])
        if found:
            out += [found, ""]
    out.append("outputs:")
    base = cfg.data_dir / pipeline
    venues = cfg.pipelines[pipeline].venues if pipeline in cfg.pipelines else ()
    for stage in (s for s in summary if s in OUTPUT_STAGES):
        folders = [base / slug(v) / stage for v in venues] if stage in PER_VENUE else [base / stage]
        out += [f"  {stage:<12} {_shown(folder)}/" for folder in folders[:3]]
        if len(folders) > 3:
            out.append(f"  {'':<12} ... and {len(folders) - 3} more venue(s)")
    out.append(f"  {'run record':<12} {_shown(base / 'runs')}/")
    built = "materialize" in summary or cfg.database.is_file()
    if built:
        out.append(f"  {'database':<12} {_shown(cfg.database)}")
    out += ["", "next:"]
    name = shlex.quote(pipeline)   # every suggested command is pasteable as it is
    pick = f" --pipeline {name}" if cfg.per_pipeline_database else ""
    if built:
        leaderboard = shlex.quote("select metric, model, mean, ci_low, ci_high from leaderboard")
        out += [f"  grebench query{pick} {leaderboard}",
                f"  grebench site{pick}        # the leaderboard, validation and paper pages as a static website",
                f"  grebench report{pick}      # figures and a markdown summary"]
    else:
        out.append(f"  grebench run {name} --stages materialize   # build the results database")
    out.append(f"  grebench run {name} --json   # these figures as JSON")
    return "\n".join(out)
