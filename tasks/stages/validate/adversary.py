"""The adaptive adversary: a bounded greedy search for the edits that raise a metric, tested on held-out papers.

A fixed set of deterministic strategies tests only the attacks someone thought of. The adversary
instead searches, per metric, over small edits of the review (through the metric registry, with the
run's evaluation LM):

    praise     insert a generic praise sentence from a fixed pool
    critique   insert a generic critique sentence from a fixed pool
    duplicate  repeat one of the review's own sentences right after it
    reorder    swap two neighbouring sentences
    delete     delete a sentence
    inject     add an instruction to the evaluator (see manipulations.INJECTION)

Selection and test never share data. Either the recipe is searched on papers outside the validation
sample (`[validate] adversary_search_papers`, drawn with the seed) and tested on every candidate of the
sample, or the candidates' papers are split with the seed into a selection part and a test part
(`selection_share`, half by default). On the selection part the search builds one
recipe, a sequence of operators: each step applies every operator once to the current text of every
selection candidate (at a position and pool sentence drawn with the seed), scores all the variants in
one call, and appends the operator whose mean gain over the selection candidates is largest, when that
gain is positive; it stops after `patience` steps without a gain or after `steps` steps. The recipe is
then applied once to every test candidate, and only those pairs (original, edited) go to the
significance test: the differences there can fall as well as rise, so a metric that no edit raises in
expectation passes however much the search found by chance on the selection part.

Since the edits add nothing about the paper, the strategy is a manipulation: a metric passes when the
recipe's texts are not significantly better than the originals on the test part. The report gives each
candidate's part, score change and the recipe.

GEM's fixed strategies (section 4.3) apply one edit chosen in advance to every candidate; the
adversary chooses its edit from the metric's own answers, so its test needs papers the choice never saw.
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
class Recipe:
    """The edits the search chose on the selection part, and what they gained there."""

    edits: list[str] = field(default_factory=list)      # "<step>:<operator>", in order
    gains: list[float] = field(default_factory=list)    # the mean gain of each accepted step on the selection part
    variants: int = 0                                   # variants scored during the search
    texts: list[str] = field(default_factory=list)      # the selection candidates' texts after the recipe
    scores: list[float] = field(default_factory=list)   # and their scores

    @property
    def operators(self) -> list[str]:
        return [edit.split(":", 1)[1] for edit in self.edits]


def _gain(score: float, base: float, sign: float) -> float:
    """How far `score` is better than `base`; 0 where either is not a number (the candidate did not move)."""
    return sign * (score - base) if math.isfinite(score) and math.isfinite(base) else 0.0


def search_recipe(
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
) -> Recipe:
    """The recipe found on the selection texts (see the module docstring). A text whose score is NaN is
    not edited; an operator that cannot edit a text leaves it as it is (no gain) at that step."""
    if len(texts) != len(original_scores):
        raise ValueError("texts and original_scores must have the same length")
    sign = 1.0 if higher_is_better else -1.0
    rng = np.random.default_rng(seed)
    recipe = Recipe(texts=list(texts), scores=[float(s) for s in original_scores])
    active = [i for i, s in enumerate(recipe.scores) if math.isfinite(s)]
    stale = 0
    for step in range(steps):
        if stale >= patience or not active:
            break
        batch: list[tuple[int, str]] = []
        ops: list[str] = []
        for op in operators:
            for i in active:
                variant = apply_operator(recipe.texts[i], op, rng, target)
                if variant is not None and variant != recipe.texts[i]:
                    batch.append((i, variant))
                    ops.append(op)
        if not batch:
            break
        scores = score(batch)
        if len(scores) != len(batch):
            raise RuntimeError(f"score function answered {len(scores)} of {len(batch)} variants")
        recipe.variants += len(batch)
        by_op: dict[str, list[tuple[int, str, float]]] = {}
        for (i, variant), s, op in zip(batch, scores, ops, strict=True):
            by_op.setdefault(op, []).append((i, variant, float(s)))
        mean_gain = {op: math.fsum(_gain(s, recipe.scores[i], sign) for i, _, s in found) / len(active)
                     for op, found in by_op.items()}
        best = max(mean_gain, key=lambda op: (mean_gain[op], -operators.index(op)))
        if mean_gain[best] <= 0:
            stale += 1
            continue
        for i, variant, s in by_op[best]:
            if math.isfinite(s):
                recipe.texts[i], recipe.scores[i] = variant, s
        recipe.edits.append(f"{step + 1}:{best}")
        recipe.gains.append(mean_gain[best])
        stale = 0
    return recipe


def apply_recipe(text: str, operators: Sequence[str], rng: np.random.Generator, target: Target = "review") -> str:
    """`text` after each operator of a recipe in turn (one the text does not allow is skipped)."""
    for op in operators:
        text = apply_operator(text, op, rng, target) or text
    return text


def split_papers(paper_ids: Sequence[str], seed: int, selection_share: float = 0.5) -> set[str]:
    """The papers of the selection part: a seeded draw of `selection_share` of them (at least one, and at least
    one left for the test when there are two or more)."""
    papers = sorted(set(paper_ids))
    if len(papers) < 2:
        return set(papers)
    k = min(len(papers) - 1, max(1, round(len(papers) * selection_share)))
    order = np.random.default_rng(seed).permutation(len(papers))
    return {papers[i] for i in order[:k]}


def _has(text: Any) -> bool:
    return isinstance(text, str) and bool(text.strip())


def papers_tested(papers: int, search_papers: int = 0, selection_share: float = 0.5) -> int:
    """How many of `papers` sampled papers the test part holds: all of them when the search has papers of its own,
    else those `split_papers` leaves."""
    if search_papers:
        return papers
    return papers - len(split_papers([str(i) for i in range(papers)], 0, selection_share))


DESCRIPTION = ("a greedy search over generic edits (praise, critique, duplicate, reorder, delete, inject) for the "
               "recipe that raises each metric most on papers of its own (or half of the sample), tested on the others")


# ---------------------------------------------------------------- the strategy in the validation workflow

ADVERSARY = pl.Schema({"metric": pl.String, "paper_id": pl.String, "candidate": pl.String, "target": pl.String,
                       "split": pl.String, "original": pl.Float64, "best": pl.Float64, "inflation": pl.Float64,
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
    selection_share: float = 0.5,
    search: tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The adversary against every metric: (pairs of the test part, perturbations, ADVERSARY report).

    `candidates`: paper_id, review_id, review_text, judgments of the candidate reviews;
    `original_scores`: their candidate scores (candidate = review_id, metric, score). A metric
    reading raw text is attacked on the review, any other on its judgment lines. The recipe is searched
    on the selection part's candidates and tested on the others' (`split_papers`); the report has a row
    per candidate of either part, `split` saying which, `best` its score after the recipe and `edits` the
    recipe. Variants are scored through the metric registry with `resources`, against the same references
    and (for the f-variational metrics) the same negative references as the original.

    `search`: (candidates, references, synopses) of papers outside the sample; the recipe is then searched
    on those candidates (their originals scored here, against their own papers' references) and tested on
    every one of `candidates`.
    """
    from tasks.core.schema import SCORING_CANDIDATES
    from tasks.metrics import get
    from tasks.stages.validate.rescore import PERTURBATIONS, SEPARATOR, score_candidates

    resources = replace(resources, by_paper=None)   # a step's few variants are scored here, not as shards
    pair_rows: list[dict[str, Any]] = []
    perturbation_rows: list[dict[str, Any]] = []
    report_rows: list[dict[str, Any]] = []
    rows = list(candidates.iter_rows(named=True))
    if search is None:
        pool, search_refs, search_synopses = rows, references, synopses
        chosen = split_papers([r["paper_id"] for r in rows], seed, selection_share)
    else:
        pool, search_refs, search_synopses = list(search[0].iter_rows(named=True)), search[1], search[2]
        chosen = {r["paper_id"] for r in pool}
        if chosen & {r["paper_id"] for r in rows}:
            raise ValueError("the adversary's search papers are among the papers it is tested on")
    for metric in get(metrics):
        target: Target = "review" if metric.reads == "raw" else "judgments"
        column = "review_text" if target == "review" else "judgments"
        level = "raw" if target == "review" else "judgments"
        sign = 1.0 if metric.higher_is_better else -1.0
        known = {c: s for c, s in original_scores.filter(pl.col("metric") == metric.name)
                 .select("candidate", "score").iter_rows()}
        selection = [r for r in pool if _has(r[column]) and r["paper_id"] in chosen]
        test = [r for r in rows if _has(r[column]) and r["paper_id"] not in chosen]
        counter = [0]

        def score(batch: Sequence[tuple[int, str]], part: list[dict[str, Any]], metric=metric, column=column,
                  counter=counter, refs: pl.DataFrame = references, syn: pl.DataFrame = synopses) -> list[float]:
            ids = []
            records = []
            for i, text in batch:
                row = part[i]
                counter[0] += 1
                cid = f"{row['review_id']}{SEPARATOR}adversary:{metric.name}#{counter[0]}"
                ids.append(cid)
                records.append({"paper_id": row["paper_id"], "candidate": cid, "source": "adversary",
                                "review_id": row["review_id"], "review_text": row["review_text"],
                                "judgments": row["judgments"], column: text})
            frame = pl.DataFrame(records, schema=SCORING_CANDIDATES)
            found = score_candidates(frame, refs, syn, [metric.name], resources, negatives, negatives_seed)
            by_id = dict(found.select("candidate", "score").iter_rows())
            return [float(by_id.get(c, math.nan)) for c in ids]

        if search is None:
            originals = [float(known.get(r["review_id"], math.nan)) for r in selection]
        else:   # the search papers' originals, against their own references
            originals = score(list(enumerate(r[column] for r in selection)), selection, refs=search_refs,
                              syn=search_synopses) if selection else []

        def score_selection(batch: Sequence[tuple[int, str]], score=score, selection=selection) -> list[float]:
            return score(batch, selection, refs=search_refs, syn=search_synopses)
        recipe = search_recipe([r[column] for r in selection], originals, score_selection,
                               higher_is_better=metric.higher_is_better, target=target, steps=steps,
                               patience=patience, seed=seed)
        edits = ", ".join(recipe.edits)
        # the test part: the recipe applied once to each candidate, at positions drawn with the seed
        rng = np.random.default_rng([seed, 1])
        edited = [apply_recipe(r[column], recipe.operators, rng, target) for r in test]
        tested = [float(known.get(r["review_id"], math.nan)) for r in test]
        todo = [(i, text) for i, text in enumerate(edited) if text != test[i][column]]
        after = list(tested)   # an unedited text keeps its score
        for (i, _), value in zip(todo, score(todo, test) if todo else [], strict=True):
            after[i] = value
        parts = [("selection", r, recipe.texts[k], originals[k], recipe.scores[k], recipe.variants if k == 0 else 0)
                 for k, r in enumerate(selection)]
        parts += [("test", r, edited[k], tested[k], after[k], 0) for k, r in enumerate(test)]
        for split, row, text, before, best, variants in parts:
            rid = row["review_id"]
            moved = sign * (best - before) if math.isfinite(best) and math.isfinite(before) else math.nan
            report_rows.append({"metric": metric.name, "paper_id": row["paper_id"], "candidate": rid,
                                "target": target, "split": split, "original": before, "best": best,
                                "inflation": moved, "edits": edits, "variants_scored": variants})
            if split != "test":
                continue
            pair_rows.append({"metric": metric.name, "strategy": "adversary", "kind": "manipulation", "level": level,
                              "paper_id": row["paper_id"], "candidate": rid, "original": before,
                              "perturbed": best, "higher_is_better": metric.higher_is_better})
            perturbation_rows.append({
                "paper_id": row["paper_id"], "review_id": rid,
                "candidate": f"{rid}{SEPARATOR}adversary:{metric.name}", "strategy": "adversary",
                "kind": "manipulation",
                "review_text": text if target == "review" else row["review_text"],
                "judgments": text if target == "judgments" else row["judgments"], "error": None,
                "level": level})
    pairs = pl.DataFrame(pair_rows, schema={"metric": pl.String, "strategy": pl.String, "kind": pl.String,
                                            "level": pl.String,
                                            "paper_id": pl.String, "candidate": pl.String, "original": pl.Float64,
                                            "perturbed": pl.Float64, "higher_is_better": pl.Boolean})
    return pairs, pl.DataFrame(perturbation_rows, schema=PERTURBATIONS), pl.DataFrame(report_rows, schema=ADVERSARY)


def largest_inflation(report: pl.DataFrame) -> dict[str, float]:
    """Per metric, the largest inflation the recipe caused on the test part (NaN when none could be measured)."""
    out: dict[str, float] = {}
    for (metric,), part in report.filter(pl.col("split") == "test").group_by("metric", maintain_order=True):
        values = part["inflation"].drop_nulls().drop_nans()
        out[metric] = float(values.max()) if values.len() else math.nan
    return out
