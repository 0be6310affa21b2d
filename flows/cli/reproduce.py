"""`grebench reproduce gem-table2`: the GEM paper's Table 2 beside the project's own validation run.

Registered on the main app as a command group: `app.add_typer(reproduce_app, name="reproduce")`.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer

from flows.cli.common import ConfigOption, fail, read_config

reproduce_app = typer.Typer(help="Reproduce a source paper's headline table with the project's own code.",
                            no_args_is_help=True)


@reproduce_app.command("gem-table2")
def gem_table2(
    release: Annotated[Path | None, typer.Option("--release", help="a release file or folder of .parquet files "
                                                 "(default: the GEM release, fetched by URL into the download cache)")] = None,
    papers: Annotated[int, typer.Option("--papers", min=1, help="papers drawn from the release (the paper: 300)")] = 300,
    metric: Annotated[list[str] | None, typer.Option("--metric", "-m", help="one of the table's metrics "
                                                     "(repeatable; default: all ten)")] = None,
    strategies: Annotated[str | None, typer.Option("--strategies", "-s", help="comma-separated; default: the "
                                                   "table's six")] = None,
    llm_papers: Annotated[int | None, typer.Option("--llm-papers", min=2, help="papers of the sample the LLM "
                                                   "strategies rewrite (default: all of them; each rewrite is a "
                                                   "long decode, slow on a CPU)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the rows as JSON instead of the table")] = False,
    config: ConfigOption = None,
) -> None:
    """Run validation on N papers of the GEM release with the paper's strategies and metrics, and print
    the project's SMDs beside the paper's Table 2, with agreement of sign and significance per cell."""
    from tasks.core.errors import GrebenchError
    from tasks.core.layout import cache_dir
    from tasks.lm import eval_spec
    from tasks.metrics import REGISTRY
    from tasks.metrics.resources import build_resources, engine_loglikelihood
    from tasks.report import gem_table2 as table2
    from tasks.stages.validate.reviews_file import ReviewsFileError, load_reviews_file
    from tasks.stages.validate.stage import validate_reviews
    from tasks.stages.validate.strategies import strategy as strategy_named

    started = time.monotonic()
    cfg = read_config(config)
    metrics = tuple(metric) if metric else tuple(table2.METRICS.values())
    chosen = tuple(s.strip() for s in strategies.split(",") if s.strip()) if strategies else tuple(table2.STRATEGIES.values())
    unknown = [m for m in metrics if m not in table2.METRICS.values()] + \
        [s for s in chosen if s not in table2.STRATEGIES.values()]
    if unknown:
        fail(f"not in the paper's table: {', '.join(unknown)} (metrics: {', '.join(table2.METRICS.values())}; "
             f"strategies: {', '.join(table2.STRATEGIES.values())})")
    try:
        files = table2.release_files(release, cache_dir(cfg, "downloads") / "gem-release")
        reviews = table2.sample_papers(table2.release_reviews(files), papers, cfg.validate.seed)
    except (table2.ReleaseError, OSError, GrebenchError) as error:
        fail(str(error).splitlines()[0])
    skipped = table2.not_run(metrics, chosen, reviews, cfg.validate.rephrase_llm is not None,
                             {m: REGISTRY[m].conditioned_on for m in metrics})
    run_metrics = tuple(m for m in metrics if m not in skipped)
    run_strategies = tuple(s for s in chosen if s not in skipped)
    spec = eval_spec(cfg.score).resolved()
    n_papers = reviews["paper_id"].n_unique()
    import polars as pl

    # the LLM strategies may rewrite a subset of the sample (drawn from it with the same seed): a rewrite is a
    # whole review decoded, where the other strategies edit text and cost only the rescoring
    llm_run = tuple(s for s in run_strategies if strategy_named(s).needs_llm)
    rule_run = tuple(s for s in run_strategies if s not in llm_run)
    llm_n = min(llm_papers or n_papers, n_papers)
    llm_reviews = reviews if llm_n == n_papers else table2.sample_papers(reviews, llm_n, cfg.validate.seed)
    rewritten = f"; LLM strategies on {llm_n} of them" if llm_run and llm_n < n_papers else ""
    title = (f"GEM Table 2 (ICLR 2023): {n_papers} papers of the GEM release{rewritten}, evaluation LM {spec.key} "
             f"on {spec.device}, strategies at the {'+'.join(cfg.validate.level)} level")
    parts = [(reviews, rule_run), (llm_reviews, llm_run)] if llm_n < n_papers else [(reviews, run_strategies)]
    results = []
    if run_metrics:
        try:
            scorer = engine_loglikelihood(eval_spec(cfg.score), cfg.score.token_budget)
            resources = build_resources(cfg.score, scorer, llm_cache=cache_dir(cfg, "llm"))
            for sample, these in parts:
                if not these:
                    continue
                # the paper's workflow: every review a candidate in turn, the paper's other reviews its references
                settings = cfg.validate.model_copy(update={"max_papers": sample["paper_id"].n_unique(),
                                                           "candidates": "all"})
                run_cfg = cfg.model_copy(update={"validate": settings})
                with tempfile.TemporaryDirectory() as folder:   # the sample in the reviews-file shape, read back checked
                    path = Path(folder) / "reviews.parquet"
                    sample.drop([c for c in ("judgments", "abstract") if sample[c].is_null().all()]).write_parquet(path)
                    try:
                        frame = load_reviews_file(path)
                    except ReviewsFileError as error:   # about the release, not the scratch copy it names
                        named = ", ".join(map(str, files))
                        fail(f"the release ({named}): {str(error).splitlines()[0].replace(str(path), 'its sample')}")
                results.append(validate_reviews(run_cfg, frame, resources, run_metrics, these).validation)
        except (ValueError, ReviewsFileError, GrebenchError) as error:
            fail(str(error).splitlines()[0])
    validation = pl.concat(results, how="diagonal_relaxed") if results else None

    from tasks.stages.validate.stats import VALIDATION_COLUMNS

    table = table2.side_by_side(validation if validation is not None else pl.DataFrame(schema=VALIDATION_COLUMNS),
                                skipped, cfg.validate.alpha)
    table = table.filter(pl.col("metric").is_in(list(metrics)) & pl.col("strategy").is_in(list(chosen)))
    if as_json:
        typer.echo(json.dumps(table.to_dicts()))
        return
    typer.echo(table2.render(table, title))
    for name, why in skipped.items():
        typer.echo(f"not run: {name}: {why}")
    if llm_run and reviews["judgments"].is_not_null().any():
        rewriter = cfg.validate.perturb_llm or cfg.preprocess
        typer.echo(f"note: the LLM strategies' rewrites ({rewriter.backend}:{rewriter.model}) are turned into judgments "
                   f"by {cfg.preprocess.backend}:{cfg.preprocess.model}, the originals' judgments come from the "
                   "release (GPT-4o); with another preprocessor their cells also measure the two preprocessors' gap")
    typer.echo(f"wall time: {time.monotonic() - started:.0f} s")
