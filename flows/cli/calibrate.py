"""`grebench calibrate binoculars`: the Binoculars threshold at a stated false-positive rate, from labelled
reviews, written into the config. Registered on the main app: `app.add_typer(calibrate_app, name="calibrate")`.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from flows.cli.common import ConfigOption, config_path, fail, read_config

calibrate_app = typer.Typer(help="Calibrate a metric's threshold on labelled data.", no_args_is_help=True)
TEXT_COLUMNS = ("review", "review_text", "text")


class Target(StrEnum):
    reference_flags = "reference_flags"   # [score.reference_flags]: the pair that flags human references
    review_quality = "review_quality"     # [score.review_quality]: the pair behind the binoculars / ai_rate metrics


def labelled(path: Path) -> tuple[list[str] | None, list[float] | None]:
    """(texts, None) or (None, scores) of a labelled file: a `binoculars` column of scores already
    computed, else a review text column (review, review_text or text); Parquet, CSV or JSON lines."""
    import polars as pl

    from tasks.core import damage

    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    read = {".parquet": pl.read_parquet, ".csv": pl.read_csv, ".jsonl": pl.read_ndjson, ".json": pl.read_ndjson}
    if path.suffix not in read:
        raise ValueError(f"{path}: not a .parquet, .csv or .jsonl file")
    with damage.reading(path, "give a Parquet, CSV or JSON-lines file of labelled reviews"):
        frame = read[path.suffix](path)
    if frame.height == 0:
        raise ValueError(f"{path}: no rows")
    if "binoculars" in frame.columns:
        if not frame.schema["binoculars"].is_numeric():
            raise ValueError(f"{path}: column binoculars holds {frame.schema['binoculars']}, not numbers")
        return None, [float("nan") if v is None else float(v) for v in frame["binoculars"].to_list()]
    column = next((c for c in TEXT_COLUMNS if c in frame.columns), None)
    if column is None:
        raise ValueError(f"{path}: no binoculars or review text column ({', '.join(TEXT_COLUMNS)}); "
                         f"found: {', '.join(frame.columns)}")
    if frame.schema[column] not in (pl.String, pl.Categorical):
        raise ValueError(f"{path}: column {column} holds {frame.schema[column]}, not text")
    return frame[column].cast(pl.String).to_list(), None


@calibrate_app.command("binoculars")
def binoculars(
    human: Annotated[Path, typer.Option("--human", help="reviews written by people (a text or binoculars column)")],
    ai: Annotated[Path, typer.Option("--ai", help="reviews written by LLMs (same columns)")],
    fpr: Annotated[float, typer.Option("--fpr", help="the false-positive rate to allow on the human reviews")] = 0.01,
    target: Annotated[Target, typer.Option("--target", help="which pair's threshold to write")] = Target.reference_flags,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the threshold, write nothing")] = False,
    config: ConfigOption = None,
) -> None:
    """Pick the Binoculars threshold that flags at most --fpr of the human reviews, on the configured pair
    (one LM twice: the single-model form), and write it with its source into the config."""
    from tasks.core.config_edit import set_keys
    from tasks.core.errors import GrebenchError
    from tasks.lm import ModelSpec
    from tasks.metrics import binoculars_calibrate as calibrate
    from tasks.metrics import binoculars_scores
    from tasks.stages.score.reference_flags import flag_specs, single_form

    cfg = read_config(config)
    if target is Target.reference_flags:
        specs = flag_specs(cfg)
        if specs is None:
            fail("the reference flags' observer is a served model: Binoculars needs a local LM")
    else:
        rq = cfg.score.review_quality
        if rq.binoculars_observer is None:
            fail("[score.review_quality] names no binoculars_observer / binoculars_performer to calibrate")
        specs = (ModelSpec(rq.binoculars_observer), ModelSpec(rq.binoculars_performer))
    try:
        scored = []
        for path in (human, ai):
            texts, given = labelled(path)
            scored.append(given if given is not None else [v for v, _ in binoculars_scores(specs, texts)])
        picked = calibrate(scored[0], scored[1], fpr)
    except (ValueError, GrebenchError) as error:
        fail(str(error).splitlines()[0])
    single = single_form(specs)
    pair = specs[0].resolved().key if single else f"{specs[0].resolved().key} / {specs[1].resolved().key}"
    source = (f"calibrated: {'single' if single else 'two'}-model form ({pair}) at FPR {fpr:g} on "
              f"{picked.n_human} human / {picked.n_ai} AI reviews ({human.name}, {ai.name})")
    typer.echo(f"threshold {picked.threshold:.6g}: flags {picked.human_flagged:.3%} of {picked.n_human} human reviews "
               f"(asked: at most {fpr:.3%}) and {picked.ai_flagged:.3%} of {picked.n_ai} AI-written ones")
    if target is Target.reference_flags:
        table = "score.reference_flags"
        keys = ("single_threshold", "single_threshold_source") if single else ("threshold", "threshold_source")
    else:
        table = "score.review_quality"
        keys = ("ai_single_threshold", "ai_single_threshold_source") if single else ("ai_threshold", None)
    values: dict[str, float | str] = {keys[0]: picked.threshold}
    if keys[1] is not None:
        values[keys[1]] = source
    if dry_run:
        typer.echo(f"(dry run) [{table}] " + ", ".join(f"{k} = {v!r}" for k, v in values.items()))
        return
    path = config_path(config)
    set_keys(path, table, values)
    typer.echo(f"written to {path} [{table}]: " + ", ".join(values))
