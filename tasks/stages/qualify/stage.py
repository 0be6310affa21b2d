"""The qualify stage's plain functions: who sits the exam, run it, write the table, apply it.

    qualify/qualification.parquet   QUALIFICATION: one row per (model, role, test)
    qualify/panel_weights.parquet   PANEL_WEIGHTS: the judging panel's Auto-PRE fusion weights
    qualify/usage.parquet           the exam's LLM calls (-> the `llm_usage` table), llm_answers.parquet

Roles (from the metrics `[score]` and `[validate]` name): `judge` when a metric needs an LLM judge
(the `[score] judges` panel, else `[score.oracle]`); `oracle` when a metric needs the LLM oracle
(each member of the readout panel `[score] oracle_readouts`, else the first evaluation LM's readout;
with `oracle_predictor = "generate"` the judge models); `matcher` when a points_* metric needs the
point matcher (`[score.review_quality] matchers`, else its LLM; tasks/stages/qualify/matcher.py, an exam of
its own on pairs of points). A model that fails a test fails its role. With `on_fail = "stop"` the
stage stops the run; with "drop" the score and validate stages leave it out of its panel
(`qualified_config`), and a role left with no qualified model stops the run here, since its metrics
would have no judge; with "report" the model stays in its role, its rows say it failed, and the
leaderboard marks the columns it produced "not qualified" (tasks/stages/validate/board_notes.py); "weigh"
keeps it as "report" does and fuses the judging panel with every member's exam weight, so a failed
member counts for what it scored (Auto-PRE's weighting without its selection).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from tasks.core.config import Config, LLMConfig, ScoreConfig
from tasks.core.errors import QualificationFailed
from tasks.core.frames import curated_reviews, judgments_text, paper_groups, synopses_wide
from tasks.core.layout import cache_dir, stage_dir, write_parquet
from tasks.core.prompts import load_prompt
from tasks.core.schema import PANEL_WEIGHTS, QUALIFICATION
from tasks.core.summary import StageSummary
from tasks.lm import ChatRequest, ModelSpec, eval_specs, local_spec
from tasks.lm.lazy import LazyLM
from tasks.metrics import get
from tasks.metrics.judge import synopsis_text
from tasks.metrics.llm_log import LLMLog, write_llm_log
from tasks.metrics.readout_panel import engine_answers, readout_entries, readout_specs
from tasks.metrics.review_quality.matching import matcher_llms
from tasks.metrics.reviseval import content_key
from tasks.stages.qualify.exam import Rewrite, draw_exam
from tasks.stages.qualify.examinee import Examinee, ReadoutExaminee, StatedExaminee
from tasks.stages.qualify.grade import exam_scores, failing, grade
from tasks.stages.qualify.matcher import (
    ReadoutMatcher,
    StatedMatcher,
    draw_match_exam,
    exam_units,
    match_scores,
)


@dataclass(frozen=True)
class Seat:
    """One model in one role: a generation backend (`llm`) or the evaluation LM's readout (`spec`)."""

    name: str
    role: str
    llm: LLMConfig | None = None
    spec: ModelSpec | None = None


def llm_key(cfg: LLMConfig) -> str:
    """The name a backend has in score rows and the qualification table (`backend/model`)."""
    return f"{cfg.backend}/{cfg.model}"


def judge_models(score: ScoreConfig) -> tuple[LLMConfig, ...]:
    return score.judges or (score.oracle,)


def seats(cfg: Config) -> list[Seat]:
    """Every model in a judging role of this run's metrics."""
    names = list(dict.fromkeys((*cfg.score.all_metrics, *cfg.validate.metrics)))
    roles = {m.judging_role for m in get(names) if m.judging_role is not None}
    out: list[Seat] = []
    for role in sorted(roles):
        if role == "matcher":
            out += [Seat(llm_key(m), role, llm=m) for m in matcher_llms(cfg)]
        elif role == "oracle" and cfg.score.oracle_predictor == "readout":
            # the readout panel's members, else the first evaluation LM (the one the oracle cells read)
            specs = readout_specs(cfg.score) or eval_specs(cfg.score)[:1]
            out += [Seat(f"readout:{spec.resolved().key}", role, spec=spec) for spec in specs]
        else:
            out += [Seat(llm_key(j), role, llm=j) for j in judge_models(cfg.score)]
    return out


def examinee(seat: Seat, score: ScoreConfig, llm_cache: Path, log: LLMLog) -> Examinee:
    """The readout where the model's probabilities are at hand (the evaluation LM, a local backend);
    a stated confidence for an API backend. A matcher seat answers the matcher's questions."""
    readout, stated = (ReadoutMatcher, StatedMatcher) if seat.role == "matcher" else (ReadoutExaminee, StatedExaminee)
    if seat.spec is not None:
        return readout(seat.name, engine_answers(seat.spec, score.token_budget))
    assert seat.llm is not None
    spec = local_spec(seat.llm)   # local weights: their next-token probabilities; an API: a stated confidence
    if spec is not None:
        return readout(seat.name, engine_answers(spec, score.token_budget))
    return stated(seat.name, LazyLM(seat.llm, llm_cache), log)


def answerer(seat: Seat) -> str:
    """Who answers a seat's questions: the readout of one model's weights (`readout:<spec key>`) where its
    next-token probabilities are read, else the seat's model. A local judge whose weights are the
    evaluation LM's (the demo's SmolLM2 as judge and as the oracle's readout) gives the same answers to
    the same questions in both roles, so it sits the exam once."""
    if seat.role != "matcher":
        spec = seat.spec if seat.spec is not None else local_spec(seat.llm) if seat.llm is not None else None
        if spec is not None:
            return f"readout:{spec.resolved().key}"
    return seat.name


Scores = Callable[[Sequence, Sequence], dict]


def sit_exam(questions: Sequence, seated: Sequence[Seat], make: Callable[[Seat], Examinee],
             scores: Scores = exam_scores, who_answers: Callable[[Seat], str] = answerer) -> pl.DataFrame:
    """(model, role, test, n, score, confidence) of every seat; seats with one answerer (`who_answers`: a
    model in two roles, one model's readout behind two names) sit the exam once.
    `scores`: the statistics of the exam (the judges' `exam_scores`, the matcher's `match_scores`)."""
    verdicts: dict[str, tuple[str, list]] = {}
    rows = []
    for seat in seated:
        key = who_answers(seat)
        if key not in verdicts:
            who = make(seat)
            verdicts[key] = (who.confidence, who.answer(questions))
        confidence, answers = verdicts[key]
        for test, (n, score) in scores(questions, answers).items():
            rows.append({"model": seat.name, "role": seat.role, "test": test, "n": n, "score": score,
                         "confidence": confidence})
    return pl.DataFrame(rows, schema={k: v for k, v in QUALIFICATION.items() if k not in ("raw_score", "threshold", "passed")})


def exam_inputs(cfg: Config, pipeline: str) -> tuple[pl.DataFrame, dict[str, str], dict[str, str]]:
    """The curated reviews (with their judgment lines once preprocessed), each paper's synopsis text
    (preprocess synopses, else the abstract) and its venue."""
    reviews = curated_reviews(cfg, pipeline)
    judged = stage_dir(cfg, pipeline, "preprocess") / "judgments.parquet"   # for the statement questions
    if judged.is_file():
        reviews = reviews.join(judgments_text(pl.read_parquet(judged)), on="review_id", how="left")
    path = stage_dir(cfg, pipeline, "preprocess") / "synopses.parquet"
    if path.is_file():
        wide = synopses_wide(pl.read_parquet(path, columns=["paper_id", "kind", "text"]))
    else:
        frames = [pl.read_parquet(p, columns=["paper_id", "abstract"]) for venue in cfg.pipelines[pipeline].venues
                  if (p := stage_dir(cfg, pipeline, "curate", venue) / "papers.parquet").is_file()]
        wide = pl.concat(frames).with_columns(pl.lit(None, pl.String).alias("assw")) if frames else \
            pl.DataFrame(schema={"paper_id": pl.String, "abstract": pl.String, "assw": pl.String})
    synopses = {r["paper_id"]: synopsis_text(r) for r in wide.iter_rows(named=True)}
    return reviews, synopses, paper_groups(cfg, pipeline)


def rewriter(cfg: LLMConfig, llm_cache: Path, log: LLMLog) -> Rewrite:
    """The `[qualify.rewriter]` LLM as the exam's polisher / rephraser (cached, temperature 0)."""
    llm = LazyLM(cfg, llm_cache)

    def rewrite(version: str, texts: Sequence[str]) -> list[str | None]:
        system = load_prompt(version)
        users = [f"<review>\n{t}\n</review>" for t in texts]
        keys = [content_key(version, system, u) for u in users]
        results = llm.generate([ChatRequest(system, u, cfg.max_tokens, custom_id=k) for k, u in zip(keys, users, strict=True)])
        out = [r.text.strip() if r.error is None and r.text and r.text.strip() else None for r in results]
        log.record(f"qualify:{version}", llm.name, llm.model, cfg, keys, results,
                   [None if o is None else float(len(o.split())) for o in out])
        return out
    return rewrite


def qualify(cfg: Config, pipeline: str, make: Callable[[Seat], Examinee] | None = None) -> StageSummary:
    """Examine every model in a judging role, write the table, stop the run where configured."""
    folder = stage_dir(cfg, pipeline, "qualify")
    seated = seats(cfg)
    log = LLMLog()
    llm_cache = cache_dir(cfg, "llm")
    if not seated:
        write_parquet(pl.DataFrame(schema=QUALIFICATION), folder / "qualification.parquet")
        return StageSummary(0, 0, details={"examined": [], "note": "no metric uses an LLM judge or oracle"})
    reviews, synopses, groups = exam_inputs(cfg, pipeline)
    rewrite = rewriter(cfg.qualify.rewriter, llm_cache, log) if cfg.qualify.rewriter is not None else None
    make = make or (lambda seat: examinee(seat, cfg.score, llm_cache, log))
    judging = [s for s in seated if s.role != "matcher"]
    matching = [s for s in seated if s.role == "matcher"]
    parts, n_questions, details = [], 0, {}
    if judging:
        questions = draw_exam(reviews, synopses, groups, cfg.qualify.items, cfg.qualify.seed, rewrite)
        parts.append(sit_exam(questions, judging, make))
        n_questions += len(questions)
    if matching:
        points = stage_dir(cfg, pipeline, "score") / "points.parquet"   # a score run's points, when there are some
        units, unit = exam_units(reviews, pl.read_parquet(points) if points.is_file() else None)
        asked = draw_match_exam(units, groups, cfg.qualify.items, cfg.qualify.seed, rewrite)
        parts.append(sit_exam(asked, matching, make, match_scores))
        n_questions += len(asked)
        details["matcher_units"] = unit
    table = grade(pl.concat(parts), cfg.qualify)
    write_parquet(table, folder / "qualification.parquet")
    write_parquet(panel_weights(cfg, table), folder / "panel_weights.parquet")
    llm = write_llm_log(log, folder)
    check(table, seated, cfg.qualify.on_fail)
    passed = table.group_by("model", "role").agg(pl.col("passed").all()).sort("role", "model")
    return StageSummary(rows_in=n_questions, rows_out=table.height, **llm, details={**details,
        "qualified": {f"{r}:{m}": p for m, r, p in passed.iter_rows()},
        "scores": {f"{r['role']}:{r['model']}:{r['test']}": round(r["score"], 4) if r["score"] == r["score"] else None
                   for r in table.iter_rows(named=True)}})


def check(table: pl.DataFrame, seated: Sequence[Seat], on_fail: str) -> None:
    """Stop on a failure when configured; with "drop", stop only when a role has no qualified model left."""
    fails = failing(table)
    if not fails:
        return
    lines = [f"{r['role']}:{r['model']} failed {r['test']} ({r['score']:.3f} vs threshold {r['threshold']:.3f}, n={r['n']})"
             for r in table.filter(~pl.col("passed")).iter_rows(named=True)]
    if on_fail in ("report", "weigh"):
        return
    if on_fail == "stop":
        raise QualificationFailed("qualification failed ([qualify] on_fail = \"stop\"):\n  " + "\n  ".join(lines))
    for role in {s.role for s in seated}:
        if {s.name for s in seated if s.role == role} <= fails.get(role, set()):
            raise QualificationFailed(f"no model in the {role} role passed the exam:\n  " + "\n  ".join(lines))


def qualified_config(cfg: Config, pipeline: str) -> Config:
    """`cfg` as the qualify stage left it, when the pipeline runs that stage: the `[score] judges` panel,
    the readout panel (`[score] oracle_readouts`) and the matchers (`[score.review_quality] matchers`)
    reduced to the models that passed; a role with no model left (a single `[score.oracle]`, a lone
    readout oracle or matcher that failed) or a model never examined stops the run. With on_fail "report"
    every model stays and the panel is as configured; with "weigh" every model stays and the judging
    panel is weighted by the exam."""
    if "qualify" not in cfg.pipelines[pipeline].stages:
        return cfg
    path = stage_dir(cfg, pipeline, "qualify") / "qualification.parquet"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: qualification not found; run the qualify stage first")
    table = pl.read_parquet(path)
    fails = failing(table)
    examined = {(m, r) for m, r in table.select("model", "role").iter_rows()}
    seated = seats(cfg)
    for seat in seated:
        if (seat.name, seat.role) not in examined:
            raise QualificationFailed(f"{seat.role}:{seat.name} was not examined: rerun the qualify stage")
    if cfg.qualify.on_fail == "report":   # every model stays; the leaderboard marks the failed ones' columns
        return cfg
    if cfg.qualify.on_fail == "weigh":    # every model stays, each member of the judging panel at its exam weight
        return with_fusion_weights(cfg, table)
    for role in sorted({s.role for s in seated}):
        mine = [s.name for s in seated if s.role == role]
        if set(mine) <= fails.get(role, set()):
            what = "is the role's only model" if len(mine) == 1 else "all failed"
            raise QualificationFailed(f"{role}: {'+'.join(mine)} failed the qualification exam and {what}")
    return with_fusion_weights(_without(cfg, fails), table)


def fusion_weights(table: pl.DataFrame, models: Sequence[str]) -> dict[str, float]:
    """Auto-PRE's fusion weight of each judging model that sat the exam: the mean of its scores over
    the judge and oracle roles' tests (P_c, P_p and the 0/1 P_s; paper 001, section 3), never of the
    raw statistics. A test it could not be scored on (nothing answered) counts 0, as it fails it: only a
    failed member kept in the panel (on_fail "weigh") can have one, and it must not weigh more for it."""
    sat = table.filter(pl.col("model").is_in(list(models)) & pl.col("role").is_in(["judge", "oracle"]))
    score = pl.col("score").fill_nan(None).fill_null(0.0)
    return {m: float(w) for m, w in sat.group_by("model").agg(score.mean()).sort("model").iter_rows()}


def panel_weights(cfg: Config, table: pl.DataFrame) -> pl.DataFrame:
    """PANEL_WEIGHTS: each member of the judging panel with its fusion weight and where it comes from
    (`exam`: the mean of its exam scores; `config`: `[score] judge_weights`; `none`: it weighs 1), and
    whether the scores use it (not with `[qualify] on_fail = "report"`, which leaves the panel as configured;
    "drop", "stop" and "weigh" weigh it)."""
    members = [llm_key(j) for j in cfg.score.judges] or [llm_key(cfg.score.oracle)]
    exam = fusion_weights(table, members)
    rows = [{"model": m, "weight": cfg.score.judge_weights.get(m, exam.get(m, 1.0)),
             "source": "config" if m in cfg.score.judge_weights else "exam" if m in exam else "none",
             "applied": cfg.qualify.on_fail != "report"} for m in members]
    return pl.DataFrame(rows, schema=PANEL_WEIGHTS)


def with_fusion_weights(cfg: Config, table: pl.DataFrame) -> Config:
    """`cfg` whose judging panel is weighted by the exam (`[score] judge_weights`; weights set by hand win)."""
    members = [llm_key(j) for j in cfg.score.judges] or [llm_key(cfg.score.oracle)]
    weights = {**fusion_weights(table, members), **cfg.score.judge_weights}
    if not weights or weights == cfg.score.judge_weights:
        return cfg
    return cfg.model_copy(update={"score": cfg.score.model_copy(update={"judge_weights": weights})})


def _without(cfg: Config, fails: dict[str, set[str]]) -> Config:
    """`cfg` with the failed members left out of the judges, readout and matcher panels."""
    score, update = cfg.score, {}
    if score.judges:
        dropped = fails.get("judge", set()) | fails.get("oracle", set())
        update["judges"] = tuple(j for j in score.judges if llm_key(j) not in dropped)
        if not update["judges"]:
            raise QualificationFailed("no judge of the [score] judges panel passed the exam")
    if score.oracle_predictor == "readout" and score.oracle_readouts:
        pairs = zip(readout_entries(score), readout_specs(score), strict=True)
        update["oracle_readouts"] = tuple(e for e, s in pairs if f"readout:{s.resolved().key}" not in fails.get("oracle", set()))
    if score.review_quality.matchers:
        kept = tuple(m for m in score.review_quality.matchers if llm_key(m) not in fails.get("matcher", set()))
        update["review_quality"] = score.review_quality.model_copy(update={"matchers": kept})
    return cfg.model_copy(update={"score": score.model_copy(update=update)}) if update else cfg
