"""Beyond Rating's review-quality metrics and the rating outcomes, one family.

Every metric is one row per (candidate, paper) with no reference (like `llm_judge_noref`): the
references enter inside the metric (Max-Recall over the paper's reviewers, the mean human rating),
and a human candidate is compared with the paper's other reviews (leave-one-out), which gives the
human baseline. The work (points, matching, question checks, chunks) is done once per call for
every metric named, by `Resources.quality` (tasks/metrics/review_quality/work.py); the tables it
leaves are the family's side tables, which the score stage writes beside the scores:

    points, point_matches, question_checks   POINTS, POINT_MATCHES, QUESTION_CHECKS (review_quality/)
    review_quality                           REVIEW_QUALITY: one row per candidate, paper and metric
    rejects                                  review fields whose points could not be read

`eval_lm` names the LLM behind the points (`<backend>/<model>`; the points_* metrics add
`|matcher:<backend>/<model>` when `[score.review_quality] matchers` sets the matcher apart), or the
common scale for the rating outcomes.

`quality_work` builds the run's work from the config and the pipeline's frames: the facts the family
reads (curated ratings, decisions and paper texts, the generated and submitted candidates' rating
answers) and its settings; tasks/metrics/resources.py `run_resources` calls it for a run that names
one of these metrics.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import polars as pl

from tasks.core.config import Config, ReviewQualityConfig
from tasks.core.frames import read_curated
from tasks.core.schema import REJECTS, SCORES, conform
from tasks.core.submitted import submission_folders
from tasks.lm.lazy import LazyLM
from tasks.metrics.registry import REVIEW_QUALITY, FamilyResult, Metric, Resources, register
from tasks.metrics.review_quality.matching import MATCH_METRICS
from tasks.metrics.review_quality.work import (
    PAPER_FACTS,
    REVIEW_FACTS,
    QualitySettings,
    QualityWork,
    ReviewFacts,
    empty_tables,
)

RATING_METRICS = ("rating_mae", "rating_mae_readout", "accept_accuracy", "accept_accuracy_readout")


def review_quality_family(metrics: Sequence[Metric], candidates: pl.DataFrame, references: pl.DataFrame,
                          negatives: pl.DataFrame | None, synopses: pl.DataFrame, resources: Resources) -> FamilyResult:
    assert resources.quality is not None   # checked by the registry
    work = replace(resources.quality, tables={}, stats=Counter())   # the tables of this call alone
    names = [m.name for m in metrics]
    values = work.evaluate(names, candidates, references, synopses, resources.embed, resources.log)
    llm = f"{work.llm.name}/{work.llm.model}" if work.llm is not None else None
    matched = f"{llm}|matcher:{work.matcher.name}/{work.matcher.model}" if work.matcher is not None else llm
    if work.settings.match_top_k is not None:   # unasked pairs count unmatched: precision and recall are lower bounds
        matched = f"{matched}|prefilter top-{work.settings.match_top_k}, lower bound"
    rows = []
    for cand in candidates.sort("paper_id", "candidate").iter_rows(named=True):
        for name in names:
            value, reason = values.get((cand["candidate"], name), (math.nan, "not_scored"))
            rows.append({"paper_id": cand["paper_id"], "candidate": cand["candidate"], "source": cand["source"],
                         "reference": None, "metric": name, "score": value, "reason": reason,
                         "eval_lm": "common_scale" if name in RATING_METRICS else
                         "binoculars" if name in ("binoculars", "ai_rate") else
                         matched if name in MATCH_METRICS else llm})
    frame = pl.DataFrame(rows, schema={**SCORES}) if rows else pl.DataFrame(schema=SCORES)
    tables = {**empty_tables(), **{n: f for n, f in work.tables.items() if n != "rejects"}}
    rejects = work.tables.get("rejects")
    if rejects is not None and rejects.height:
        tables["rejects"] = conform(rejects, REJECTS)
    return FamilyResult(frame.select(SCORES.names()).sort("metric", "paper_id", "candidate"), tables,
                        {k: int(v) for k, v in sorted(work.stats.items())})


def quality_facts(resources: Resources) -> list[pl.DataFrame]:
    """The facts the family reads besides its inputs (ratings, decisions, paper texts): a paper shard's name
    hashes its papers' rows of them."""
    facts = resources.quality.facts if resources.quality is not None else None
    return [facts.reviews, facts.papers] if facts is not None else []


# the review-quality metrics that read the paper, its decision or the candidate alone, never the human references
NO_REFERENCES = ("question_score", "summary_coverage", "binoculars", "ai_rate", "accept_accuracy",
                 "accept_accuracy_readout")


def _m(name: str, reads: str, higher: bool, description: str, whole_run: bool = False) -> Metric:
    return Metric(name, reads, "none", REVIEW_QUALITY, higher, description, review_quality_family,  # type: ignore[arg-type]
                  whole_run=whole_run, facts=quality_facts, role="matcher" if name in MATCH_METRICS else None,
                  reads_references=name not in NO_REFERENCES)


register(
    *(m for f in ("strengths", "weaknesses") for m in (
        _m(f"points_precision_{f}", "statements", True,
           f"share of the candidate's atomic {f} points that match a point of some human reviewer of the paper "
           "(Beyond Rating eq. 2; LLM-judged matches after an embedding pre-filter)"),
        _m(f"points_recall_{f}", "statements", True,
           f"Max-Recall of {f}: the largest share of one human reviewer's {f} points matched by the candidate "
           "(Beyond Rating eq. 3)"),
        _m(f"points_f1_{f}", "statements", True, f"harmonic mean of points_precision_{f} and points_recall_{f}"))),
    *(_m(f"focus_kl_{f}", "statements", False,
         f"KL(the paper's humans || the candidate) of the eight-category distribution of {f} points, Laplace-smoothed "
         "(Beyond Rating eq. 4 taken per paper, so a model's mean over papers has an interval; the paper pools all "
         "of a model's papers into one distribution)")
      for f in ("strengths", "weaknesses", "questions")),
    _m("question_score", "statements", True,
       "share of the candidate's question points that are grounded (Explain: the paper holds what is asked about) "
       "or constructive (Supplement: the paper lacks what is asked for), checked against the paper's top-5 chunks "
       "(Beyond Rating eq. 5)"),
    _m("summary_coverage", "raw", True,
       "sum of the 5 largest cosines between the summary's MiniLM embedding and the paper's 512-word chunks "
       "(Beyond Rating eq. 1)"),
    _m("binoculars", "raw", True,
       "Binoculars score (observer log-perplexity / observer-performer cross-perplexity), mean over the four "
       "text fields; needs two causal LMs sharing a tokenizer ([score.review_quality] binoculars), else NaN"),
    _m("ai_rate", "raw", False,
       "1 when the review's Binoculars score is below [score.review_quality] ai_threshold (0.9015, Beyond Rating "
       "section 4.6), so a model's mean is the share of its reviews classed as AI-written; NaN as binoculars"),
    _m("rating_mae", "raw", False,
       "|candidate rating - mean human rating of the paper| on the common scale, for ratings the review states (a "
       "human's, a generated review's stated or parsed rating, a submitted one); a read-out rating is NaN here"),
    _m("rating_mae_readout", "raw", False,
       "the same error for ratings read out of the model at the rating position (an expectation over the scale, a "
       "top-token list or a follow-up answer: `rating_method` readout/toplogprobs/asked); stated ratings are NaN here"),
    _m("accept_accuracy", "raw", True,
       "1 when the candidate's stated rating is on the paper's side of the accept threshold (accept vs reject "
       "decision); a read-out rating is NaN here"),
    _m("accept_accuracy_readout", "raw", True,
       "the same agreement for ratings read out of the model at the rating position; stated ratings are NaN here"),
)


# ---- the run's work, built from the config and the pipeline's frames (tasks/metrics/resources.py) ----

def settings(cfg: Config) -> QualitySettings:
    rq = cfg.score.review_quality
    pair = (rq.binoculars_observer, rq.binoculars_performer) if rq.binoculars_observer else None
    return QualitySettings(match_top_k=rq.match_top_k, kl_alpha=rq.kl_alpha, chunk_tokens=rq.chunk_tokens,
                           chunk_overlap=rq.chunk_overlap, chunk_top_k=rq.chunk_top_k,
                           accept_threshold=rq.accept_threshold,
                           rating_scale=tuple(float(v) for v in cfg.curate.common_scale), binoculars=pair,
                           ai_threshold=ai_threshold(rq, pair),
                           points_max_tokens=rq.points_max_tokens)


def ai_threshold(rq: ReviewQualityConfig, pair: tuple[str, str] | None) -> float:
    """ai_rate's threshold for the Binoculars form in use: `ai_threshold` for two LMs, the calibrated
    `ai_single_threshold` for one LM twice; NaN where that form has none (ai_rate is then NaN)."""
    if pair is not None and pair[0] == pair[1]:
        return math.nan if rq.ai_single_threshold is None else float(rq.ai_single_threshold)
    return float(rq.ai_threshold)


def load_facts(cfg: Config, pipeline: str) -> ReviewFacts:
    """Human ratings (common scale), candidates' ratings (read at generation, tasks/stages/generate/ratings.py)
    and rating answers, decisions and PDF texts (without the related-work section) of the pipeline's
    benchmark papers."""
    reviews, papers, pdf_texts = read_curated(cfg, pipeline)
    humans = reviews.select("review_id", "paper_id", pl.col("rating").cast(pl.Float64),
                            pl.lit(None, pl.String).alias("rating_answer"), pl.lit("stated").alias("rating_method"))
    generated = [cfg.data_dir / pipeline / "generate" / "candidates.parquet",   # submitted ratings count too
                 *(f / "submitted_candidates.parquet" for f in submission_folders(cfg, pipeline))]
    frames = [humans]
    for path in (p for p in generated if p.is_file()):
        gen = pl.read_parquet(path)
        answer = pl.col("rating_answer") if "rating_answer" in gen.columns else pl.lit(None, pl.String)
        read = pl.col("rating") if "rating" in gen.columns else pl.lit(None, pl.Float64)   # read at generation
        method = pl.col("rating_method") if "rating_method" in gen.columns else pl.lit(None, pl.String)
        frames.append(gen.select(pl.col("candidate_id").alias("review_id"), "paper_id",
                                 read.cast(pl.Float64).alias("rating"), answer.cast(pl.String).alias("rating_answer"),
                                 method.cast(pl.String).alias("rating_method")))
    # the paper as Beyond Rating reads it (paper 003, section 3): without Related Work, appendices,
    # acknowledgements and references (the body text where a PDF's related-work section was not found)
    body = (pl.coalesce("text_no_related_work", "text") if pdf_texts is not None
            and "text_no_related_work" in pdf_texts.columns else pl.col("text"))
    texts = (pdf_texts.select("paper_id", body.alias("text")).unique("paper_id") if pdf_texts is not None
             else pl.DataFrame(schema={"paper_id": pl.String, "text": pl.String}))
    decision = pl.col("decision") if "decision" in papers.columns else pl.lit(None, pl.String)
    paper_facts = papers.select("paper_id", decision.cast(pl.String).alias("decision")).join(texts, on="paper_id", how="left")
    return ReviewFacts(pl.concat(frames).cast(dict(REVIEW_FACTS)), paper_facts.select(PAPER_FACTS.names()).cast(dict(PAPER_FACTS)))


def quality_work(cfg: Config, pipeline: str, llm_cache: Path | None) -> QualityWork:
    """The run's QualityWork (its LLM built on first use)."""
    llm_cfg = cfg.score.review_quality.llm or cfg.preprocess
    llm = LazyLM(llm_cfg, llm_cache) if llm_cache is not None else None
    matchers = cfg.score.review_quality.matchers   # the first listed matches (qualify drops failed ones)
    matcher = LazyLM(matchers[0], llm_cache) if matchers and llm_cache is not None else None
    return QualityWork(settings(cfg), load_facts(cfg, pipeline), llm, matcher=matcher)
