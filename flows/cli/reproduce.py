"""`grebench reproduce gem-table2`: the GEM paper's Table 2 beside the project's own validation run.

Registered on the main app as a command group: `app.add_typer(reproduce_app, name="reproduce")`.
"""

from __future__ import annotations

import json
import math
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
                                                   "table's six (meaningless_elongation_proxy may stand in for "
                                                   "meaningless_elongation, its rows named a proxy)")] = None,
    llm_papers: Annotated[int | None, typer.Option("--llm-papers", min=2, help="papers of the sample the LLM "
                                                   "strategies rewrite (default: all of them; each rewrite is a "
                                                   "long decode, slow on a CPU)")] = None,
    workflow: Annotated[str, typer.Option("--workflow", help="algorithm1 (the paper's: one seeded candidate per "
                                          "paper, strategies on the raw review, candidates preprocessed by the "
                                          "configured LLM) or judgment-lines (a cheaper proxy: every review a "
                                          "candidate, strategies on the release's judgment lines)")] = "algorithm1",
    judgments: Annotated[str, typer.Option("--judgments", help="algorithm1: preprocess (both sides' judgments by "
                                           "the configured preprocessor) or given (a proxy: the references keep the "
                                           "release's GPT-4o lines, the candidates' are preprocessed)")] = "preprocess",
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
    if workflow not in table2.WORKFLOWS:
        fail(f"--workflow {workflow!r}: one of {', '.join(table2.WORKFLOWS)}")
    if judgments not in ("preprocess", "given"):
        fail(f"--judgments {judgments!r}: preprocess or given")
    cfg = read_config(config)
    metrics = tuple(metric) if metric else tuple(table2.METRICS.values())
    chosen = tuple(s.strip() for s in strategies.split(",") if s.strip()) if strategies else tuple(table2.STRATEGIES.values())
    unknown = [m for m in metrics if m not in table2.METRICS.values()] + \
        [s for s in chosen if s not in table2.STRATEGIES.values() and s not in table2.PROXIES]
    if unknown:
        fail(f"not in the paper's table: {', '.join(unknown)} (metrics: {', '.join(table2.METRICS.values())}; "
             f"strategies: {', '.join(table2.STRATEGIES.values())}; proxies: {', '.join(table2.PROXIES)})")
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
    preprocessor = f"{cfg.preprocess.backend}:{cfg.preprocess.preprocessor}"
    both = workflow == "algorithm1" and judgments == "preprocess"
    how = table2.WORKFLOWS[workflow].format(preprocessor=preprocessor, references=(
        "the references preprocessed by it too" if both else "PROXY: the references keeping the release's GPT-4o "
        "judgments"))
    title = (f"GEM Table 2 (ICLR 2023): {n_papers} papers of the GEM release{rewritten}, evaluation LM {spec.key} "
             f"on {spec.device}; {how}")
    parts = [(reviews, rule_run), (llm_reviews, llm_run)] if llm_n < n_papers else [(reviews, run_strategies)]
    results = []
    if run_metrics:
        try:
            scorer = engine_loglikelihood(eval_spec(cfg.score), cfg.score.token_budget)
            resources = build_resources(cfg.score, scorer, llm_cache=cache_dir(cfg, "llm"))
            for sample, these in parts:
                if not these:
                    continue
                # GEM Algorithm 1 (section 4.2): one seeded candidate per paper, the other reviews its references,
                # the strategies on the raw review, original and perturbed candidate preprocessed alike; or the proxy
                paper_way = workflow == "algorithm1"
                settings = cfg.validate.model_copy(update={
                    "max_papers": sample["paper_id"].n_unique(), "candidates": "one" if paper_way else "all",
                    "level": ("raw",) if paper_way else ("judgments",),
                    "judgments": "preprocess" if both else "given"})
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
    cells = [table2.PROXIES.get(s, s) for s in chosen]
    table = table.filter(pl.col("metric").is_in(list(metrics)) & pl.col("strategy").is_in(cells))
    if as_json:
        typer.echo(json.dumps(table.to_dicts()))
        return
    typer.echo(table2.render(table, title))
    for name, why in skipped.items():
        typer.echo(f"not run: {name}: {why}")
    if llm_run and reviews["judgments"].is_not_null().any() and workflow != "algorithm1":
        rewriter = cfg.validate.perturb_llm or cfg.preprocess
        typer.echo(f"note: the LLM strategies' rewrites ({rewriter.backend}:{rewriter.model}) are turned into judgments "
                   f"by {preprocessor}, the originals' judgments come from the "
                   "release (GPT-4o); with another preprocessor their cells also measure the two preprocessors' gap")
    reads_lines = any(REGISTRY[m].reads == "judgments" for m in run_metrics)
    if workflow == "algorithm1" and not both and reads_lines:
        typer.echo(f"note: the candidates' judgments come from {preprocessor}, the references' from the release "
                   "(GPT-4o): GEM then also measures how far the two preprocessors' judgments differ in style")
    typer.echo(f"wall time: {time.monotonic() - started:.0f} s")


@reproduce_app.command("gem-table3")
def gem_table3(
    source: Annotated[str | None, typer.Option("--source", help="GRE-bench.xlsx of the GEM repository: a local path, "
                                               "or a URL fetched once into the download cache (default: the "
                                               "repository's file on GitHub)")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out-dir", "-o", help="where the size figure goes (default: "
                                                 "<data_dir>/report)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON row per cell instead of the table")] = False,
    config: ConfigOption = None,
) -> None:
    """Spearman's correlation of GEM and GEM-S with seven other benchmarks from the GEM repository's file, each
    cell with n and a 95% interval beside the paper's Table 3, and the scores against parameter size per family
    (the paper's Figure 5)."""
    from tasks.core.layout import cache_dir
    from tasks.report import gem_table3 as table3
    from tasks.report.benchmarks import plot_size

    cfg = read_config(config)
    try:
        path = table3.source_file(source or table3.SOURCE_URL, cache_dir(cfg, "downloads") / "gem-table3")
        book = table3.read_workbook(path)
    except table3.SourceError as error:
        fail(str(error))
    table = table3.side_by_side(book)
    folder = out_dir or cfg.data_dir / "report"
    try:
        figure = plot_size(table3.size_points(book), folder / "gem_figure5_size.png",
                           "GRE-bench score against parameter size per family (GEM Figure 5, from the GEM file)")
    except OSError as error:
        fail(f"{folder}: cannot write the figure ({error.strerror or error})")
    if as_json:
        keys = ("metric", "benchmark", "spearman", "n", "ci_low", "ci_high", "interval", "paper_row", "paper",
                "agreement", "why", "note", "reason")
        typer.echo(json.dumps([{k: None if isinstance(r[k], float) and math.isnan(r[k]) else r[k] for k in keys}
                               for r in table.iter_rows(named=True)]))
        return
    matched, found, differ = table3.table7_match(book)
    typer.echo(table3.render(table, f"GEM Table 3 (section 5) beside {path.name}: {book.height} models; "
                             f"95% interval: {table3.INTERVAL}"))
    typer.echo(f"note: the file's GEM and GEM-S equal the paper's Table 7 (appendix A.3, evaluation LM Llama-3.1 8B, "
               f"GEM-S on the abstract) for {matched} of the {found} Table 7 models it names"
               f"{' (not: ' + '; '.join(differ) + ')' if differ else ''}, so GEM-S is set beside "
               "Table 3's GEM-S (abstract) row; the paper does not say which evaluation LM's scores Table 3 ranks "
               "(its main results use Llama-3.1 70B) nor each cell's n")
    typer.echo(f"figure: {figure}" if figure else "figure: none (no model has both a size and a score)")
