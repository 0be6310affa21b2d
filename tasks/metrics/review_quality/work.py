"""The review-quality work of one run: what the metric family (tasks/metrics/quality.py)
asks for, computed once per call over every candidate, with the tables it leaves behind.

`ReviewFacts` are what the texts do not carry: the human reviews' ratings on the common scale,
the generated candidates' rating answers, each paper's decision and text. `QualityWork.evaluate`
extracts points (one batch for every review), matches them, checks questions, embeds summaries
and chunks, and returns one (value, reason) per (candidate, metric); `tables` keeps `points`,
`point_matches`, `question_checks`, `review_quality` (one row per candidate, paper and metric)
and the `rejects` for the score stage to write.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from tasks.core.prompts import load_prompt
from tasks.metrics.review_quality import formulas as fm
from tasks.metrics.review_quality.fields import parse_rating, sections
from tasks.metrics.review_quality.matching import POINT_MATCHES, match_points, mean_vectors
from tasks.metrics.review_quality.points import POINTS, extract_points
from tasks.metrics.review_quality.questions import QUESTION_CHECKS, check_questions, paper_chunks

PR_FIELDS = ("strengths", "weaknesses")
KL_FIELDS = ("strengths", "weaknesses", "questions")

# The per-candidate values behind the registry's review-quality metrics (one row per candidate,
# paper and metric), and the facts the texts do not carry.
REVIEW_QUALITY = pl.Schema({"paper_id": pl.String, "candidate": pl.String, "source": pl.String,
                            "metric": pl.String, "value": pl.Float64, "reason": pl.String})
REVIEW_FACTS = pl.Schema({"review_id": pl.String, "paper_id": pl.String, "rating": pl.Float64,
                          "rating_answer": pl.String, "rating_method": pl.String})
# how a rating came about (tasks/stages/generate/ratings.py `rating_method`): the review states it, or it is read
# from the model at the rating position (an expectation, a top-token list, a follow-up answer)
STATED_METHODS = (None, "stated", "submitted", "answer")
RATING_ERRORS = {"rating_mae": "stated", "rating_mae_readout": "readout"}   # metric -> the ratings it reads
ACCEPT_AGREEMENTS = {"accept_accuracy": "stated", "accept_accuracy_readout": "readout"}   # the same split
PAPER_FACTS = pl.Schema({"paper_id": pl.String, "decision": pl.String, "text": pl.String})



@dataclass(frozen=True)
class QualitySettings:
    """The `[score.review_quality]` keys the work reads (tasks/core/config_score.py ReviewQualityConfig)."""

    match_top_k: int | None = None   # None: every pair asked; k: an embedding prefilter (lower bounds)
    kl_alpha: float = 1.0
    chunk_tokens: int = 512
    chunk_overlap: int = 128
    chunk_top_k: int = 5
    accept_threshold: float = 6.0
    rating_scale: tuple[float, ...] = (1, 3, 5, 6, 8, 10)
    binoculars: tuple[str, str] | None = None   # (observer, performer) local model names
    ai_threshold: float = 0.9015                 # ai_rate: a Binoculars score below it counts as AI-written
    points_max_tokens: int = 768                 # answer budget of one field's points


@dataclass(frozen=True)
class ReviewFacts:
    reviews: pl.DataFrame   # REVIEW_FACTS: humans' `rating` (common scale), candidates' `rating_answer`
    papers: pl.DataFrame    # PAPER_FACTS

    def ratings(self) -> dict[str, float]:
        return {r: v for r, v in self.reviews.select("review_id", "rating").iter_rows() if v is not None}

    def answers(self) -> dict[str, str | None]:
        return dict(self.reviews.select("review_id", "rating_answer").iter_rows())

    def methods(self) -> dict[str, str | None]:
        if "rating_method" not in self.reviews.columns:
            return {}
        return dict(self.reviews.select("review_id", "rating_method").iter_rows())


@dataclass
class QualityWork:
    settings: QualitySettings
    facts: ReviewFacts
    llm: Any                                    # a ChatLM (CachedLM / LazyLM): points, matching, questions
    matcher: Any = None                         # the point matcher apart from `llm` ([score.review_quality] matchers)
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    stats: Counter = field(default_factory=Counter)

    def evaluate(self, names: Sequence[str], candidates: pl.DataFrame, references: pl.DataFrame,
                 synopses: pl.DataFrame, embed: Callable[[Sequence[str]], list[np.ndarray]] | None,
                 log: Any = None) -> dict[tuple[str, str], fm.Scored]:
        """(candidate, metric) -> (value, reason) for the metrics `names` (tasks/metrics/quality.py)."""
        from tasks.core.frames import reference_sets

        wanted = set(names)
        sets = list(reference_sets(candidates, references))
        out: dict[tuple[str, str], fm.Scored] = {}
        if wanted & {*RATING_ERRORS, *ACCEPT_AGREEMENTS}:
            out.update(self._ratings(sets, wanted))
        text_metrics = wanted - {*RATING_ERRORS, *ACCEPT_AGREEMENTS, "binoculars", "ai_rate"}
        if wanted & {"binoculars", "ai_rate"}:
            scores = self._binoculars(sets)
            if "binoculars" in wanted:
                out.update(scores)
            if "ai_rate" in wanted:   # per review 1 when classed AI-written: a model's mean is its AI rate
                line = self.settings.ai_threshold   # NaN: the Binoculars form in use has no calibrated threshold
                out.update({(c, "ai_rate"): (math.nan, why) if math.isnan(v) else
                            (math.nan, "binoculars_uncalibrated") if math.isnan(line) else
                            (float(v < line), None) for (c, _), (v, why) in scores.items()})
        if text_metrics:
            if embed is None:
                raise RuntimeError("the review-quality text metrics need the embedding model (Resources.embed)")
            out.update(self._texts(text_metrics, sets, candidates, references, synopses, embed, log))
        rows = [{"paper_id": c["paper_id"], "candidate": c["candidate"], "source": c["source"], "metric": m,
                 "value": out[(c["candidate"], m)][0], "reason": out[(c["candidate"], m)][1]}
                for c, _ in sets for m in sorted(wanted) if (c["candidate"], m) in out]
        self.tables["review_quality"] = pl.DataFrame(rows, schema=REVIEW_QUALITY) if rows else pl.DataFrame(
            schema=REVIEW_QUALITY)
        return out

    # ---- rating outcomes --------------------------------------------------------------------
    def _ratings(self, sets: list, wanted: set[str]) -> dict[tuple[str, str], fm.Scored]:
        ratings, answers, methods = self.facts.ratings(), self.facts.answers(), self.facts.methods()
        decisions = dict(self.facts.papers.select("paper_id", "decision").iter_rows())
        out = {}
        for cand, refs in sets:
            how = "stated"
            if cand["review_id"] is not None:          # a human review: its own rating
                own = ratings.get(cand["review_id"])
                rating, why = (math.nan, "no_rating") if own is None else (own, None)
            elif ratings.get(cand["candidate"]) is not None:   # a generated review's rating, read at generation
                rating, why = ratings[cand["candidate"]], None
                how = "stated" if methods.get(cand["candidate"]) in STATED_METHODS else "readout"
            else:
                rating, why = parse_rating(answers.get(cand["candidate"]), self.settings.rating_scale)
            humans = [ratings[r["review_id"]] for r in refs if r["review_id"] in ratings]
            for name, reads in RATING_ERRORS.items():   # the error of a stated rating and of a read-out one apart
                if name in wanted:
                    out[(cand["candidate"], name)] = (
                        (math.nan, why) if why else (math.nan, f"rating_{how}: see rating_mae"
                                                               f"{'_readout' if how == 'readout' else ''}")
                        if how != reads else fm.rating_error(rating, humans))
            for name, reads in ACCEPT_AGREEMENTS.items():   # a stated and a read-out rating's side apart
                if name in wanted:
                    out[(cand["candidate"], name)] = (
                        (math.nan, why) if why else (math.nan, f"rating_{how}: see accept_accuracy"
                                                               f"{'_readout' if how == 'readout' else ''}")
                        if how != reads else fm.accept_agreement(rating, decisions.get(cand["paper_id"]),
                                                                 self.settings.accept_threshold))
        return out

    def _binoculars(self, sets: list) -> dict[tuple[str, str], fm.Scored]:
        if self.settings.binoculars is None:
            return {(c["candidate"], "binoculars"): (math.nan, "binoculars_needs_two_lms") for c, _ in sets}
        from tasks.metrics.review_quality.binoculars import review_scores

        return review_scores(self.settings.binoculars, [(c["candidate"], c["review_text"]) for c, _ in sets])

    # ---- text metrics -------------------------------------------------------------------------
    def _texts(self, wanted: set[str], sets: list, candidates: pl.DataFrame, references: pl.DataFrame,
               synopses: pl.DataFrame, embed: Callable, log: Any) -> dict[tuple[str, str], fm.Scored]:
        if self.llm is None:
            raise RuntimeError("the review-quality text metrics need an LLM (the score stage's LLM cache folder)")
        out: dict[tuple[str, str], fm.Scored] = {}
        # a candidate is its human review when it carries that review's text; otherwise (a generated
        # review, or a perturbed copy in validation) its own text is split into points under its own id
        ref_text = dict(references.select("review_id", "review_text").iter_rows())
        own = candidates.filter(pl.col("review_id").is_null() | (
            pl.col("review_text") != pl.col("review_id").replace_strict(ref_text, default=None)).fill_null(True))
        reviews = pl.concat([
            references.select("review_id", "paper_id", pl.lit("human").alias("source"), "review_text"),
            own.select(pl.col("candidate").alias("review_id"), "paper_id", "source", "review_text"),
        ]).unique("review_id", keep="first", maintain_order=True)
        points = pl.DataFrame(schema=POINTS)
        needs_points = wanted - {"summary_coverage"}
        if needs_points:
            # only the fields the metrics read: points_* / focus_kl_* of a field, question_score the questions
            fields = {f for f in KL_FIELDS if any(m.endswith(f"_{f}") for m in needs_points)}
            fields |= {"questions"} if "question_score" in needs_points else set()
            got = extract_points(reviews, self.llm, load_prompt("points-v1"), self.settings.points_max_tokens, fields)
            points = got.points
            self.stats.update({f"points_{k}": v for k, v in got.stats.items()})
            self.tables["rejects"] = pl.DataFrame(got.rejects, schema={
                "stage": pl.String, "entity": pl.String, "entity_id": pl.String, "paper_id": pl.String,
                "rule": pl.String, "detail": pl.String}) if got.rejects else pl.DataFrame()
        self.tables["points"] = points
        owners = set(own["candidate"].to_list())
        key_of = pl.DataFrame({"review_id": [c if c in owners else r for c, r in
                                             candidates.select("candidate", "review_id").iter_rows()],
                               "cid": candidates["candidate"]}, schema={"review_id": pl.String, "cid": pl.String})
        cand_points = points.join(key_of, on="review_id")            # candidate id -> its points
        human_points = points.filter(pl.col("review_id").is_in(references["review_id"].implode()))
        pr_fields = [f for f in PR_FIELDS if any(m.endswith(f"_{f}") and m.startswith("points_") for m in wanted)]
        if pr_fields:
            out.update(self._precision_recall(wanted, pr_fields, sets, cand_points, human_points, embed))
        kl = [f for f in KL_FIELDS if f"focus_kl_{f}" in wanted]
        if kl:
            out.update(self._focus(kl, sets, cand_points, human_points))
        if wanted & {"question_score", "summary_coverage"}:
            out.update(self._grounding(wanted, sets, cand_points, synopses, embed))
        return out

    def _precision_recall(self, wanted: set[str], fields: list[str], sets: list, cand_points: pl.DataFrame,
                          human_points: pl.DataFrame, embed: Callable) -> dict[tuple[str, str], fm.Scored]:
        pairs = [(c["candidate"], r["review_id"]) for c, refs in sets for r in refs]
        mine = cand_points.filter(pl.col("field").is_in(fields)).drop("review_id").rename({"cid": "review_id"})
        got = match_points(mine.select(POINTS.names()), human_points.filter(pl.col("field").is_in(fields)), pairs,
                           embed, self.matcher or self.llm, load_prompt("point-match-v1"),
                           self.settings.match_top_k)
        self.tables["point_matches"] = got.matches
        self.stats.update({f"match_{k}": v for k, v in got.stats.items()})
        m_by = {k: g for k, g in got.matches.group_by("candidate", "field", "reference")}
        n_points = {(r, f): n for r, f, n in mine.group_by("review_id", "field").len().iter_rows()}
        h_points = {(r, f): n for r, f, n in human_points.group_by("review_id", "field").len().iter_rows()}
        out = {}
        for cand, refs in sets:
            c = cand["candidate"]
            for f in fields:
                n_a = n_points.get((c, f), 0)
                mats, unanswered = [], False
                for r in refs:
                    n_h = h_points.get((r["review_id"], f), 0)
                    mat = np.zeros((n_a, n_h))
                    g = m_by.get((c, f, r["review_id"]))
                    if g is not None:
                        unanswered |= bool(g["match"].is_null().any())
                        for a, h, v in g.select("a_position", "h_position", "match").iter_rows():
                            mat[a, h] = v or 0
                    mats.append(mat)
                if unanswered:
                    p = rec = (math.nan, "match_unanswered")
                elif n_a == 0 and any(h_points.get((r["review_id"], f), 0) for r in refs):
                    # nothing to match: a NaN with why, never a precision or recall of 0
                    p = rec = (math.nan, missing_points_reason(cand["review_text"], f))
                else:
                    p = fm.precision(np.hstack(mats) if mats else np.zeros((n_a, 0)))
                    rec = fm.max_recall(mats)
                out[(c, f"points_precision_{f}")] = p
                out[(c, f"points_recall_{f}")] = rec
                f1 = fm.f1(p[0], rec[0])
                out[(c, f"points_f1_{f}")] = (f1, None) if not math.isnan(f1) else (math.nan, p[1] or rec[1])
        return out

    def _focus(self, fields: list[str], sets: list, cand_points: pl.DataFrame,
               human_points: pl.DataFrame) -> dict[tuple[str, str], fm.Scored]:
        """Focus KL per candidate and field: the category distribution of the paper's human points (its
        references') against the candidate's own (Beyond Rating eq. 4 on one paper), so a model's board mean
        over papers has an interval that says how much the papers differ."""
        out = {}
        for cand, refs in sets:
            ref_ids = [r["review_id"] for r in refs]
            for f in fields:
                ai = cand_points.filter((pl.col("cid") == cand["candidate"]) & (pl.col("field") == f))["category"]
                hu = human_points.filter(pl.col("review_id").is_in(ref_ids) & (pl.col("field") == f))["category"]
                ai_list, hu_list = ai.to_list(), hu.to_list()
                out[(cand["candidate"], f"focus_kl_{f}")] = fm.focus_kl(
                    [hu_list.count(x) for x in fm.CATEGORIES], [ai_list.count(x) for x in fm.CATEGORIES],
                    self.settings.kl_alpha)
        return out

    def _grounding(self, wanted: set[str], sets: list, cand_points: pl.DataFrame, synopses: pl.DataFrame,
                   embed: Callable) -> dict[tuple[str, str], fm.Scored]:
        texts = dict(self.facts.papers.select("paper_id", "text").iter_rows())
        abstracts = dict(synopses.select("paper_id", "abstract").iter_rows()) if synopses.height else {}
        papers = {c["paper_id"] for c, _ in sets}
        body = {p: texts.get(p) or abstracts.get(p) or "" for p in papers}
        chunked = paper_chunks(body, embed, self.settings.chunk_tokens, self.settings.chunk_overlap)
        out = {}
        if "summary_coverage" in wanted:
            summaries = [(c["candidate"], c["paper_id"], sections(c["review_text"]).get("summary")) for c, _ in sets]
            have = [s for s in summaries if s[2]]
            vecs = dict(zip([s[0] for s in have], mean_vectors(embed, [s[2] for s in have]), strict=True)) if have else {}
            for cid, paper, _ in summaries:
                out[(cid, "summary_coverage")] = (math.nan, "no_summary") if cid not in vecs else fm.coverage(
                    vecs[cid], chunked[paper].vectors, self.settings.chunk_top_k)
        if "question_score" in wanted:
            qs = cand_points.filter(pl.col("field") == "questions").drop("review_id").rename({"cid": "review_id"})
            got = check_questions(qs.select(POINTS.names()), chunked, embed, self.llm,
                                  load_prompt("question-check-v1"), self.settings.chunk_top_k)
            self.tables["question_checks"] = got.checks
            self.stats.update({f"questions_{k}": v for k, v in got.stats.items()})
            values: dict[str, list] = {}
            for r, v in got.checks.select("review_id", "value").iter_rows():
                values.setdefault(r, []).append(v)
            for cand, _ in sets:
                mine = values.get(cand["candidate"], [])
                no_text = mine and not chunked[cand["paper_id"]].texts and all(v is None for v in mine)
                out[(cand["candidate"], "question_score")] = ((math.nan, "no_paper_text") if no_text
                                                              else fm.question_score(mine))
        return out


def missing_points_reason(review_text: str | None, field_name: str) -> str:
    """Why a candidate has no points in `field_name`: `no_candidate_field` when its review has no such
    part (nor a merged strengths and weaknesses part) for the extractor to read, else
    `no_candidate_points` (the part was read and gave no usable point; the `rejects` table says why)."""
    parts = sections(review_text)
    has_part = field_name in parts or (field_name in ("strengths", "weaknesses") and "strengths_and_weaknesses" in parts)
    return "no_candidate_points" if has_part else "no_candidate_field"


def empty_tables() -> dict[str, pl.DataFrame]:
    return {"points": pl.DataFrame(schema=POINTS), "point_matches": pl.DataFrame(schema=POINT_MATCHES),
            "question_checks": pl.DataFrame(schema=QUESTION_CHECKS), "review_quality": pl.DataFrame(schema=REVIEW_QUALITY)}
