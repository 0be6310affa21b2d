"""The adaptive adversary: a bounded greedy search for the edits that raise a metric the most.

A fixed set of deterministic strategies tests only the attacks someone thought of. The adversary
instead searches, per candidate and per metric, over small edits of the review and keeps whichever
raises that metric's score (through the metric registry, with the run's evaluation LM):

    praise     insert a generic praise sentence from a fixed pool
    critique   insert a generic critique sentence from a fixed pool
    duplicate  repeat one of the review's own sentences right after it
    reorder    swap two neighbouring sentences
    delete     delete a sentence
    inject     add an instruction to the evaluator (see manipulations.INJECTION)

Each step applies every operator once, at a position (and pool sentence) drawn with the seed, to
the current text of every candidate still searching; all the variants of a step are scored in one
call. A candidate moves to its best variant when that is strictly better than its current text
("better" follows the metric's `higher_is_better`) and stops after `patience` steps without a gain
or after `steps` steps. Since the edits add nothing about the paper, the strategy is a
manipulation: a metric passes when the best texts found are not significantly better than the
originals across candidates. The largest inflation found is reported beside the test.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import polars as pl

from tasks.core.review_text import is_header, split_sentences
from tasks.stages.validate.attack_text import INJECTION
from tasks.stages.validate.perturb import split_judgments

Target = Literal["review", "judgments"]
OPERATORS = ("praise", "critique", "duplicate", "reorder", "delete", "inject")

# Generic sentences that fit any paper; nothing in them is about a particular submission.
PRAISE = (
    "The paper is clearly written and well organized.",
    "The experiments are thorough and convincing.",
    "The contribution is novel and of broad interest to the community.",
    "The method is well motivated and technically sound.",
)
CRITIQUE = (
    "Some parts of the presentation could be made clearer.",
    "The experimental comparison with prior work could be more extensive.",
    "The limitations of the approach deserve a fuller discussion.",
    "Some claims would benefit from additional evidence.",
)
PRAISE_JUDGMENTS = (
    "The reviewer praises the clarity and organization of the paper.",
    "The reviewer finds the experiments thorough and convincing.",
    "The reviewer considers the contribution novel and of broad interest.",
    "The reviewer finds the method well motivated and technically sound.",
)
CRITIQUE_JUDGMENTS = (
    "The reviewer asks for a clearer presentation of some parts.",
    "The reviewer asks for a more extensive comparison with prior work.",
    "The reviewer asks for a fuller discussion of the limitations.",
    "The reviewer asks for more evidence for some claims.",
)

# a batch of (candidate index, text) -> one score per entry, NaN where it could not be scored
ScoreFn = Callable[[Sequence[tuple[int, str]]], list[float]]


@dataclass(frozen=True)
class Units:
    """A text as units (sentences, or judgment lines) with the separator after each."""

    parts: tuple[tuple[str, str], ...]

    @classmethod
    def parse(cls, text: str, target: Target) -> Units:
        if target == "judgments":
            lines, sep = split_judgments(text)
            return cls(tuple((line, sep) for line in lines))
        units = tuple((s, sep) for s, sep in split_sentences(text) if s.strip())
        return cls(units)

    def text(self) -> str:
        return "".join(s + sep for s, sep in self.parts).rstrip() + ("\n" if self.parts else "")


def _insert_after(parts: list[tuple[str, str]], j: int, unit: str, target: Target) -> None:
    """Insert `unit` after unit j (-1: first) in the same paragraph or list as that unit."""
    if target == "judgments":
        sep = parts[0][1] if parts else "\n"
        parts.insert(j + 1, (unit, sep))
    elif j < 0 or is_header(parts[j][0]):
        parts.insert(j + 1, (unit, " "))
    else:
        sentence, sep = parts[j]
        parts[j] = (sentence, " ")
        parts.insert(j + 1, (unit, sep))


def apply_operator(text: str, op: str, rng: np.random.Generator, target: Target = "review") -> str | None:
    """`text` after one edit `op` at a position drawn from `rng`; None when the edit is impossible.

    Section headers stay where they are: only sentences (or judgment lines) are duplicated,
    swapped or deleted, and an inserted sentence joins the paragraph of the sentence it follows.
    """
    parts = list(Units.parse(text, target).parts)
    movable = [i for i, (unit, _) in enumerate(parts) if target == "judgments" or not is_header(unit)]
    if op in ("praise", "critique"):
        pool = {("praise", "review"): PRAISE, ("critique", "review"): CRITIQUE,
                ("praise", "judgments"): PRAISE_JUDGMENTS, ("critique", "judgments"): CRITIQUE_JUDGMENTS}[(op, target)]
        sentence = pool[int(rng.integers(len(pool)))]
        _insert_after(parts, int(rng.integers(len(parts))) if parts else -1, sentence, target)
    elif op == "duplicate":
        if not movable:
            return None
        at = movable[int(rng.integers(len(movable)))]
        _insert_after(parts, at, parts[at][0], target)
    elif op == "reorder":
        pairs = [i for i in movable if i + 1 in movable]
        if not pairs:
            return None
        at = pairs[int(rng.integers(len(pairs)))]
        (a, sa), (b, sb) = parts[at], parts[at + 1]
        parts[at], parts[at + 1] = (b, sa), (a, sb)
    elif op == "delete":
        if len(movable) < 2:
            return None
        del parts[movable[int(rng.integers(len(movable)))]]
    elif op == "inject":
        if target == "judgments":
            _insert_after(parts, len(parts) - 1, INJECTION, target)
        else:
            parts.append((INJECTION, ""))
            if len(parts) > 1:
                parts[-2] = (parts[-2][0], "\n\n")
    else:
        raise ValueError(f"unknown operator {op!r}; known: {', '.join(OPERATORS)}")
    return Units(tuple(parts)).text()


@dataclass
class Search:
    """One candidate's search: its original and best text and score, and the edits that led there."""

    original_text: str
    original_score: float
    text: str
    score: float
    edits: list[str] = field(default_factory=list)
    stale: int = 0
    variants: int = 0       # variants of this candidate scored


def _gain(score: float, sign: float) -> float:
    return -math.inf if not math.isfinite(score) else sign * score


def greedy_search(
    texts: Sequence[str],
    original_scores: Sequence[float],
    score: ScoreFn,
    *,
    higher_is_better: bool = True,
    target: Target = "review",
    steps: int = 4,
    patience: int = 2,
    operators: Sequence[str] = OPERATORS,
    seed: int = 0,
) -> list[Search]:
    """Greedy search per candidate (see the module docstring); one `Search` per text, in order.

    A candidate whose original score is NaN is not searched (its best stays the original).
    """
    if len(texts) != len(original_scores):
        raise ValueError("texts and original_scores must have the same length")
    sign = 1.0 if higher_is_better else -1.0
    rng = np.random.default_rng(seed)
    searches = [Search(t, s, t, s) for t, s in zip(texts, original_scores, strict=True)]
    for step in range(steps):
        active = [i for i, s in enumerate(searches) if s.stale < patience and math.isfinite(s.score)]
        if not active:
            break
        batch: list[tuple[int, str]] = []
        labels: list[str] = []
        for i in active:
            for op in operators:
                variant = apply_operator(searches[i].text, op, rng, target)
                if variant is not None and variant != searches[i].text:
                    batch.append((i, variant))
                    labels.append(f"{step + 1}:{op}")
        if not batch:
            break
        scores = score(batch)
        if len(scores) != len(batch):
            raise RuntimeError(f"score function answered {len(scores)} of {len(batch)} variants")
        best: dict[int, tuple[float, str, str]] = {}
        for (i, variant), s, label in zip(batch, scores, labels, strict=True):
            searches[i].variants += 1
            if i not in best or _gain(s, sign) > _gain(best[i][0], sign):
                best[i] = (s, variant, label)
        for i in active:
            found = best.get(i)
            if found is not None and _gain(found[0], sign) > _gain(searches[i].score, sign):
                searches[i].score, searches[i].text = found[0], found[1]
                searches[i].edits.append(found[2])
                searches[i].stale = 0
            else:
                searches[i].stale += 1
    return searches


def inflation(search: Search, higher_is_better: bool = True) -> float:
    """How far the search moved the score in the metric's better direction (0 when it found nothing)."""
    if not (math.isfinite(search.score) and math.isfinite(search.original_score)):
        return math.nan
    return (search.score - search.original_score) * (1.0 if higher_is_better else -1.0)


DESCRIPTION = ("a bounded greedy search over generic edits (praise, critique, duplicate, reorder, delete, inject) "
               "for the largest rise of each metric")


# ---------------------------------------------------------------- the strategy in the validation workflow

ADVERSARY = pl.Schema({"metric": pl.String, "paper_id": pl.String, "candidate": pl.String, "target": pl.String,
                       "original": pl.Float64, "best": pl.Float64, "inflation": pl.Float64,
                       "edits": pl.String, "variants_scored": pl.Int64})


def run_adversary(
    candidates: pl.DataFrame,
    original_scores: pl.DataFrame,
    references: pl.DataFrame,
    synopses: pl.DataFrame,
    metrics: Sequence[str],
    resources: Any,
    *,
    steps: int = 4,
    patience: int = 2,
    seed: int = 0,
    negatives: int = 4,
    negatives_seed: int = 0,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The adversary against every metric: (pairs, perturbations, ADVERSARY report).

    `candidates`: paper_id, review_id, review_text, judgments of the candidate reviews;
    `original_scores`: their candidate scores (candidate = review_id, metric, score). A metric
    reading raw text is attacked on the review, any other on its judgment lines. Variants are
    scored through the metric registry with `resources`, against the same references and (for the
    f-variational metrics) the same negative references as the original.
    """
    from tasks.core.schema import SCORING_CANDIDATES
    from tasks.metrics import get
    from tasks.stages.validate.rescore import PERTURBATIONS, SEPARATOR, score_candidates

    resources = replace(resources, by_paper=None)   # a step's few variants are scored here, not as shards
    pair_rows: list[dict[str, Any]] = []
    perturbation_rows: list[dict[str, Any]] = []
    report_rows: list[dict[str, Any]] = []
    rows = list(candidates.iter_rows(named=True))
    for metric in get(metrics):
        target: Target = "review" if metric.reads == "raw" else "judgments"
        column = "review_text" if target == "review" else "judgments"
        known = {c: s for c, s in original_scores.filter(pl.col("metric") == metric.name)
                 .select("candidate", "score").iter_rows()}
        usable = [r for r in rows if isinstance(r[column], str) and r[column].strip()]
        counter = [0]

        def score(batch: Sequence[tuple[int, str]], metric=metric, usable=usable, column=column,
                  counter=counter) -> list[float]:
            ids = []
            records = []
            for i, text in batch:
                row = usable[i]
                counter[0] += 1
                cid = f"{row['review_id']}{SEPARATOR}adversary:{metric.name}#{counter[0]}"
                ids.append(cid)
                records.append({"paper_id": row["paper_id"], "candidate": cid, "source": "adversary",
                                "review_id": row["review_id"], "review_text": row["review_text"],
                                "judgments": row["judgments"], column: text})
            frame = pl.DataFrame(records, schema=SCORING_CANDIDATES)
            found = score_candidates(frame, references, synopses, [metric.name], resources, negatives,
                                     negatives_seed)
            by_id = dict(found.select("candidate", "score").iter_rows())
            return [float(by_id.get(c, math.nan)) for c in ids]

        searches = greedy_search([r[column] for r in usable],
                                 [float(known.get(r["review_id"], math.nan)) for r in usable], score,
                                 higher_is_better=metric.higher_is_better, target=target, steps=steps,
                                 patience=patience, seed=seed)
        for row, found in zip(usable, searches, strict=True):
            rid = row["review_id"]
            level = "raw" if target == "review" else "judgments"
            pair_rows.append({"metric": metric.name, "strategy": "adversary", "kind": "manipulation", "level": level,
                              "paper_id": row["paper_id"], "candidate": rid, "original": found.original_score,
                              "perturbed": found.score, "higher_is_better": metric.higher_is_better})
            perturbation_rows.append({
                "paper_id": row["paper_id"], "review_id": rid,
                "candidate": f"{rid}{SEPARATOR}adversary:{metric.name}", "strategy": "adversary",
                "kind": "manipulation",
                "review_text": found.text if target == "review" else row["review_text"],
                "judgments": found.text if target == "judgments" else row["judgments"], "error": None,
                "level": level})
            report_rows.append({"metric": metric.name, "paper_id": row["paper_id"], "candidate": rid,
                                "target": target, "original": found.original_score, "best": found.score,
                                "inflation": inflation(found, metric.higher_is_better),
                                "edits": ", ".join(found.edits), "variants_scored": found.variants})
    pairs = pl.DataFrame(pair_rows, schema={"metric": pl.String, "strategy": pl.String, "kind": pl.String,
                                            "level": pl.String,
                                            "paper_id": pl.String, "candidate": pl.String, "original": pl.Float64,
                                            "perturbed": pl.Float64, "higher_is_better": pl.Boolean})
    return pairs, pl.DataFrame(perturbation_rows, schema=PERTURBATIONS), pl.DataFrame(report_rows, schema=ADVERSARY)


def largest_inflation(report: pl.DataFrame) -> dict[str, float]:
    """Per metric, the largest inflation the adversary found over candidates (NaN when none could be measured)."""
    out: dict[str, float] = {}
    for (metric,), part in report.group_by("metric", maintain_order=True):
        values = part["inflation"].drop_nulls().drop_nans()
        out[metric] = float(values.max()) if values.len() else math.nan
    return out
