"""The validate stage's ends: read the pipeline's outputs, run the workflow, build the leaderboard, write.

    validate/validation.parquet             per metric x strategy: n, mean change, smd + CI, p, passed
    validate/human_correlation.parquet      per metric: Spearman rho with human quality scores
    validate/length_confound.parquet        per metric: Spearman rho of the score with the candidate's length
    validate/adversary.parquet              per metric x candidate: the adversary's best score and its edits
    validate/leaderboard.parquet            per metric x eval LM x model: mean over papers, 90% CI
    validate/leaderboard_agreement.parquet  per metric: rho between the boards of two evaluation LMs
    validate/comparisons.parquet            per board and pair of models: paired difference, interval, p
    validate/release_changes.parquet        the changelog of the pipeline's releases (releases/<id>.parquet)
    validate/perturbations.parquet          every perturbed candidate (text, judgments, error)
    validate/pairs.parquet                  original and perturbed score of every tested candidate
    validate/rejects.parquet                failed perturbations and preprocessing, unusable reviews
    validate/validation_data.parquet        which reviews were validated on: source, license, papers, rows
                                            ([validate] reviews: the curated ones, a shipped sample or a file)
    validate/requests/, results/            GEM scoring shards (resumable, as in the score stage, and in the
                                            validate flow fanned out the same way: tasks/scoring/fanout.py);
                                            requests the score stage already answered come from score/results/
    validate/metric_shards/                 the metrics behind an LLM (oracle cells, judges, RevisEval, review
                                            quality) over the perturbed candidates, as paper shards
                                            (tasks/scoring/metric_shards.py), resumable and fanned out the same way
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any

import polars as pl

from tasks.core import damage
from tasks.core.config import Config, PreprocessConfig
from tasks.core.frames import read_judgments, read_synopses
from tasks.core.layout import cache_dir, stage_dir, write_parquet
from tasks.core.summary import StageSummary
from tasks.lm import ModelSpec, eval_spec
from tasks.metrics import Resources, candidate_scores, get
from tasks.metrics.llm_log import LLMLog, write_llm_log
from tasks.metrics.resources import run_resources
from tasks.scoring.metric_shards import MetricShardRunner, MetricShards, run_metric_shards_in_process
from tasks.scoring.shards import ShardedLoglikelihood, ShardRunner, run_in_process
from tasks.stages.validate.board_notes import annotate
from tasks.stages.validate.comparisons import COMPARISONS, CompareSettings, compare, with_ranks_and_ties
from tasks.stages.validate.eval_lms import validate_each_eval_lm
from tasks.stages.validate.leaderboard import AGREEMENT, LEADERBOARD, agreement, leaderboard, per_paper
from tasks.stages.validate.releases import Release, changelog, read_releases, record_release, release_of
from tasks.stages.validate.reuse import ReusingLoglikelihood
from tasks.stages.validate.review_data import curated_provenance, load_review_data, validation_data
from tasks.stages.validate.strategies import strategy
from tasks.stages.validate.workflow import Perturbed, Preprocessor, ValidationResult, run_validation


def llm_preprocessor(backend: Any, cfg: PreprocessConfig, beside: Any = None) -> Preprocessor:
    """Reviews -> (judgment lines, rejects) with the preprocessing stage's prompt and checks. With `beside`
    (a second backend of the same local model), the reviews, longest first, are cut into batches
    (`lane_parts`: at most `cfg.batch_size`, at most half the reviews) that two lanes take as they come free,
    side by side on half the cores each (tasks/lm/local.py `in_lanes`); a batch's answers depend on it
    alone, so not on which lane ran it."""
    from tasks.judgments.extract import preprocess_reviews
    from tasks.lm.local import in_lanes, lane_parts

    def run(reviews: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        if beside is None or reviews.height < 2:
            out = preprocess_reviews(reviews, backend, cfg)
            return out.judgments, out.rejects
        ordered = reviews.sort(pl.col("review_text").str.len_chars().fill_null(0), "review_id",
                               descending=[True, False], maintain_order=True)
        chunks = [ordered[part.start:part.stop] for part in lane_parts(ordered.height, 2, cfg.batch_size)]
        outs = in_lanes(chunks, [backend, beside], lambda chunk, llm: preprocess_reviews(chunk, llm, cfg),
                        "preprocess-lane")
        return (pl.concat([o.judgments for o in outs], how="vertical_relaxed"),
                pl.concat([o.rejects for o in outs], how="vertical_relaxed"))
    return run


def read_reviews(cfg: Config, pipeline: str) -> pl.DataFrame:
    """REVIEWS_IN rows of the pipeline: the curated reviews of the benchmark papers (the sample every
    stage after curation works on: only these have judgments and synopses, so every metric is
    validated on the same papers) with their judgments and synopses; group = venue."""
    from tasks.core.frames import benchmark_only

    frames = []
    for venue in cfg.pipelines[pipeline].venues:
        path = stage_dir(cfg, pipeline, "curate", venue) / "reviews.parquet"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: curated reviews not found; run the curate stage first")
        frames.append(benchmark_only(damage.read_parquet(path, columns=["paper_id", "review_id", "review_text"]),
                                     path.parent).with_columns(group=pl.lit(venue)))
    reviews = pl.concat(frames)
    metrics = get(cfg.validate.metrics)
    judgments = read_judgments(cfg, pipeline, metrics)
    if judgments is not None:
        reviews = reviews.join(judgments, on="review_id", how="left")
    synopses = read_synopses(cfg, pipeline, metrics)
    if synopses is not None:
        reviews = reviews.join(synopses, on="paper_id", how="left")
    return reviews


def judgments_source(cfg: Config, curated: bool) -> str:
    """`[validate] judgments` with "auto" resolved: "given" for the curated reviews, else "preprocess"."""
    chosen = cfg.validate.judgments
    if chosen == "auto":
        return "given" if curated else "preprocess"
    return chosen


def judgments_by(cfg: Config, curated: bool, given_by: object) -> str:
    """Who wrote the judgment lines the validation compared, as the outputs say it."""
    if judgments_source(cfg, curated) == "preprocess" or curated:
        return f"{cfg.preprocess.preprocessor}, both sides"
    if "raw" not in cfg.validate.level:
        return f"{given_by or 'the file'} (the given lines, a proxy for {cfg.preprocess.preprocessor})"
    return (f"{given_by or 'the file'} (the given lines, a proxy; candidates at the raw level by "
            f"{cfg.preprocess.preprocessor})")


def validate_reviews(cfg: Config, reviews: pl.DataFrame, resources: Resources,
                     metrics: tuple[str, ...] | None = None, strategies: tuple[str, ...] | None = None,
                     made: dict[bool, Perturbed] | None = None,
                     adversary_turn: Callable[[], AbstractContextManager[Any]] | None = None,
                     curated: bool = True) -> ValidationResult:
    """`run_validation` with the config's settings; the LLM backends are built only when needed.

    `curated`: the reviews are the pipeline's own (their lines made by the preprocess stage), False for a
    shipped sample or a file; `[validate] judgments = "auto"` keeps the curated reviews' lines and has every
    other source's reviews preprocessed again (`judgments_source`).

    The preprocessor is the [preprocess] LLM; the LLM strategies rewrite with [validate.perturb_llm]
    when it is set (else the [preprocess] LLM), rephrase_second with [validate.rephrase_llm]. A local
    preprocessor or rewriter gets a second instance on the same weights: they work in two lanes.
    `made`: perturbations an earlier call made on the same reviews (`run_validation`); none is built twice.
    `adversary_turn`: the context the adversary runs in (`run_validation`).
    """
    v = cfg.validate.model_copy(update={"judgments": judgments_source(cfg, curated)})
    metrics, strategies = metrics or v.metrics, strategies or v.strategies
    backend = preprocess = beside = None
    lines = "judgments" in reviews.columns and reviews["judgments"].is_not_null().any()
    judgment_metrics = any(m.reads == "judgments" for m in get(metrics))
    raw_level = judgment_metrics and ("raw" in v.level or v.judgments == "preprocess")
    backends: dict[str, Any] = {}
    rewriter = v.perturb_llm or cfg.preprocess
    perturbers = {name: f"{rewriter.backend}:{rewriter.model}" for name in strategies
                  if strategy(name).needs_llm and name != "rephrase_second"}
    if "rephrase_second" in strategies:
        if v.rephrase_llm is None:
            raise ValueError("strategy rephrase_second needs a [validate.rephrase_llm] table")
        perturbers["rephrase_second"] = f"{v.rephrase_llm.backend}:{v.rephrase_llm.model}"
    wanted = any(strategy(s).needs_llm for s in strategies) or (judgment_metrics and not lines) or raw_level
    if wanted and judgment_metrics not in (made or {}):
        from tasks.lm import make_lm, runs_locally

        backend = make_lm(cfg.preprocess, cache_dir(cfg, "llm"))
        if runs_locally(cfg.preprocess):    # a second lane on the same weights
            beside = make_lm(cfg.preprocess, cache_dir(cfg, "llm"))
        preprocess = llm_preprocessor(backend, cfg.preprocess, beside)
        if v.perturb_llm is not None:
            backend = make_lm(v.perturb_llm, cache_dir(cfg, "llm"))
            beside = make_lm(v.perturb_llm, cache_dir(cfg, "llm")) if runs_locally(v.perturb_llm) else None
        if "rephrase_second" in strategies:
            backends["rephrase_second"] = make_lm(v.rephrase_llm, cache_dir(cfg, "llm"))   # type: ignore[arg-type]
    settings = v.model_copy(update={"metrics": tuple(metrics), "strategies": tuple(strategies)})
    return run_validation(reviews, settings, resources, backend=backend, preprocess=preprocess,
                          negatives=cfg.score.negatives, negatives_seed=cfg.score.negatives_seed,
                          backends=backends, perturbers=perturbers, beside=beside, made=made,
                          adversary_turn=adversary_turn)


def validate_pipeline(cfg: Config, pipeline: str, fan_out: bool = False) -> ValidationResult:
    """The workflow on the reviews `[validate] reviews` names (the pipeline's curated reviews, a shipped
    sample of real reviews or a review file: tasks/stages/validate/review_data.py), once per evaluation LM
    of `[score] eval_lms`
    (tasks/stages/validate/eval_lms.py); log-likelihoods the score stage already has are reused, the rest
    scored as resumable shards (tasks/stages/validate/reuse.py): in this process, or with `fan_out` one
    Prefect task per shard on the score stage's task runner behind its concurrency limit
    (tasks/scoring/fanout.py). The metrics behind an LLM are scored the same way as paper shards
    (validate/metric_shards/). The judges' / oracle's calls go to validate/usage.parquet."""
    run: ShardRunner = run_in_process
    run_metrics: MetricShardRunner = run_metric_shards_in_process
    slots = None
    if fan_out:
        from tasks.scoring.fanout import fan_out as fanned
        from tasks.scoring.fanout import fan_out_metrics
        from tasks.scoring.shards import eval_lm_slots

        slots = eval_lm_slots(cfg)
        run, run_metrics = fanned(cfg.score, slots), fan_out_metrics(cfg.score, slots)
    used: list[ReusingLoglikelihood] = []
    log = LLMLog()
    llm_cache = cache_dir(cfg, "llm")
    by_paper = MetricShards(stage_dir(cfg, pipeline, "validate") / "metric_shards", cfg, pipeline, llm_cache,
                            run_metrics, slots, per_model=False)   # its candidates: human reviews, perturbed

    def resources(spec: ModelSpec) -> Resources:
        used.append(validation_loglikelihood(cfg, pipeline, spec, run))
        return run_resources(cfg, pipeline, cfg.validate.metrics, used[-1], spec, llm_cache, log, by_paper)
    data = load_review_data(cfg)   # [validate] reviews: a shipped sample or a review file; None: the curated ones
    reviews = data.reviews if data is not None else read_reviews(cfg, pipeline)
    provenance = data.provenance if data is not None else curated_provenance(cfg, pipeline, reviews)
    curated = data is None
    provenance = {**provenance, "judgments_by": judgments_by(cfg, curated, provenance.get("judgments_by"))}
    result = validate_each_eval_lm(cfg, reviews, resources, functools.partial(validate_reviews, curated=curated),
                                   side_by_side=by_paper.beside)
    result = replace(result, data=validation_data(provenance, cfg, int(result.stats.get("papers", 0))))
    runs = [r for u in used for r in u.inner.runs]
    result.stats |= {"loglikelihood_reused": sum(u.reused for u in used),
                     "loglikelihood_asked": sum(u.asked for u in used),
                     "shards": sum(u.inner.shards for u in used),
                     "requests_reused": sum(u.inner.reused for u in used),   # results of earlier shards
                     "shards_scored": sum(r["status"] == "scored" for r in runs),
                     "shards_skipped": sum(r["status"] == "skipped" for r in runs), **by_paper.details()}
    write_llm_log(log, stage_dir(cfg, pipeline, "validate"))
    return result


def validation_loglikelihood(cfg: Config, pipeline: str, spec: ModelSpec | None = None,
                             run: ShardRunner = run_in_process) -> ReusingLoglikelihood:
    """Validation's log-likelihoods under `spec` (default: the first evaluation LM): the score stage's
    answers where it has them (same request key), the rest scored as resumable shards under the
    validate folder (tasks/stages/validate/reuse.py), each shard run by `run`."""
    shards = ShardedLoglikelihood(stage_dir(cfg, pipeline, "validate"), spec or eval_spec(cfg.score),
                                  cfg.score.token_budget, cfg.score.shard_size, run)
    return ReusingLoglikelihood(shards, stage_dir(cfg, pipeline, "score"))


def read_candidate_scores(cfg: Config, pipeline: str) -> pl.DataFrame | None:
    """The score stage's per-candidate scores (None when the score stage has not run)."""
    folder = stage_dir(cfg, pipeline, "score")
    if (folder / "candidate_scores.parquet").is_file():
        return damage.read_parquet(folder / "candidate_scores.parquet")
    if (folder / "scores.parquet").is_file():
        return candidate_scores(damage.read_parquet(folder / "scores.parquet"))
    return None


@dataclass
class BoardTables:
    """The leaderboard and what is published with it (tasks/stages/validate/comparisons.py, releases.py)."""

    leaderboard: pl.DataFrame       # LEADERBOARD + rank_low, rank_high, tied_with, release_id
    agreement: pl.DataFrame         # AGREEMENT
    comparisons: pl.DataFrame       # COMPARISONS
    release: Release | None = None  # None before the score stage has run


def read_exclusions(cfg: Config, pipeline: str) -> pl.DataFrame | None:
    """The contamination guard's exclusions of the generated and the submitted candidates."""
    from tasks.core.submitted import submitted_exclusions

    path = stage_dir(cfg, pipeline, "generate") / "exclusions.parquet"
    frames = [damage.read_parquet(path)] if path.is_file() else []
    submitted = submitted_exclusions(cfg, pipeline)
    frames += [submitted] if submitted.height else []
    return pl.concat(frames, how="diagonal_relaxed") if frames else None


def build_leaderboard(cfg: Config, pipeline: str) -> BoardTables:
    """The leaderboard (with rank intervals, ties and the release id), the agreement of evaluation LMs
    and the paired comparisons, from the score stage's outputs and the guard's exclusions."""
    from tasks.core.submitted import submitted_names

    scores = read_candidate_scores(cfg, pipeline)
    if scores is None:   # no score stage in this pipeline (validation alone): an empty board of the full shape
        empty = pl.DataFrame(schema={**LEADERBOARD, "rank_low": pl.Int64, "rank_high": pl.Int64,
                                     "tied_with": pl.List(pl.String), "release_id": pl.String})
        return BoardTables(empty, pl.DataFrame(schema=AGREEMENT), pl.DataFrame(schema=COMPARISONS))
    exclusions = read_exclusions(cfg, pipeline)
    v = cfg.validate
    board = leaderboard(scores, exclusions, v.leaderboard_confidence, submitted_names(cfg, pipeline))
    pairs = stage_dir(cfg, pipeline, "score") / "scores.parquet"
    exam = stage_dir(cfg, pipeline, "qualify") / "qualification.parquet"
    board = annotate(board, damage.read_parquet(pairs) if pairs.is_file() else None,
                     damage.read_parquet(exam) if exam.is_file() and "qualify" in cfg.pipelines[pipeline].stages else None)
    settings = CompareSettings(v.leaderboard_confidence, v.compare_alpha, v.compare_correction, v.compare_resamples,
                               v.seed)
    comparisons, ranks = compare(per_paper(scores, exclusions), settings, board.select("metric", "eval_lm", "model",
                                                                                       "rank"))
    release = release_of(cfg, pipeline)
    board = with_ranks_and_ties(board, comparisons, ranks).with_columns(release_id=pl.lit(release.release_id))
    return BoardTables(board, agreement(board), comparisons, release)


def write_outputs(cfg: Config, pipeline: str, result: ValidationResult, boards: BoardTables) -> StageSummary:
    """Write the validate stage's tables and record the release; rows in: candidate x strategy pairs
    tested, rows out: validation rows."""
    board = boards.leaderboard
    frames = {
        "validation": result.validation,
        "human_correlation": result.human_correlation,
        "length_confound": result.length_confound,
        "adversary": result.adversary,
        "leaderboard": board,
        "leaderboard_agreement": boards.agreement,
        "comparisons": boards.comparisons,
        "perturbations": result.perturbations,
        "pairs": result.pairs,
        "rejects": result.rejects,
        "validation_data": result.data,
    }
    if boards.release is not None:
        record_release(cfg, pipeline, boards.release, sorted(set(board["model"].to_list())))
        frames["release_changes"] = changelog(read_releases(cfg, pipeline))
    folder = stage_dir(cfg, pipeline, "validate")
    for name, frame in frames.items():
        write_parquet(frame, folder / f"{name}.parquet")
    from tasks.stages.validate.strategies import STRATEGIES

    by_llm = result.perturbations.filter(pl.col("strategy").is_in([n for n, s in STRATEGIES.items() if s.needs_llm])) \
        if {"strategy", "error"} <= set(result.perturbations.columns) else pl.DataFrame()
    if by_llm.height and by_llm["error"].is_not_null().all():   # kept on disk, yet not a result
        from tasks.core.errors import EmptyOutputError

        raise EmptyOutputError(f"validate: every one of {by_llm.height} LLM perturbations failed (first error: "
                               f"{by_llm['error'][0]}); see {folder / 'perturbations.parquet'}")
    failing = result.validation.filter(result.validation["passed"].not_())
    return StageSummary(
        rows_in=result.perturbations.height,
        rows_out=result.validation.height,
        details={
            **result.stats,
            "data": result.data["label"][0] if result.data.height else None,
            "tests": result.validation.height,
            "tests_passed": int(result.validation["passed"].sum()),
            "tests_failed": failing.height,
            "tests_inconclusive": int(result.validation["passed"].is_null().sum()),
            "failing": [f"{m}/{s}" for m, s in failing.select("metric", "strategy").iter_rows()],
            "leaderboard_rows": board.height,
            "comparisons": boards.comparisons.height,
            "release_id": boards.release.release_id if boards.release else None,
            "rejects": result.rejects.height,
        },
    )
