"""The one registry of validation strategies: every degradation and manipulation, built here.

A strategy is a degradation (a worse review: a metric must fall) or a manipulation (no better
review: a metric must not rise). Deterministic ones carry their two text forms (the raw review and
the judgment lines); LLM ones are made by tasks/stages/validate/llm_perturb.py with the prompts of
tasks/stages/validate/prompts.py (meaningless_elongation, GEM D.2.2, by elongation.py: the LLM only
summarises); the adversary is a search (tasks/stages/validate/adversary.py).
The text functions live in perturb.py (GEM's strategies) and manipulations.py (surface attacks).
Adding a strategy is one entry below; the config checks, the workflow and the CLI read this dict.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import polars as pl

from tasks.stages.validate import adversary, manipulations
from tasks.stages.validate.perturb import (
    Target,
    filler_elongation,
    judgment_deletion,
    judgment_elongation,
    random_replacement,
    sentence_deletion,
)

Kind = Literal["degradation", "manipulation"]
TextForm = Callable[[str], str]


@dataclass(frozen=True)
class Strategy:
    name: str
    kind: Kind
    needs_llm: bool
    description: str
    review: TextForm | None = None       # the raw-review form of a deterministic, text-by-text strategy
    judgments: TextForm | None = None    # its judgment-line form
    # an LLM strategy that rewrites the judgment lines themselves for the metrics that read judgments (GEM
    # appendix D.2.1: the rephrasers rewrite "the original review judgments"); the raw review is rewritten too,
    # for the metrics that read raw text. False: the rewritten raw review is preprocessed into judgments.
    rewrites_judgments: bool = False
    # the procedure the strategy follows, where its rows must name it beside the perturber (a paper's, or a proxy)
    procedure: str | None = None


def _llm(name: str, kind: Kind, description: str, rewrites_judgments: bool = False,
         procedure: str | None = None) -> Strategy:
    return Strategy(name, kind, True, description, rewrites_judgments=rewrites_judgments, procedure=procedure)


def perturber(name: str, by: str | None = None) -> str:
    """What perturbed a strategy's rows: `by` (an LLM's backend:model), else "llm", "rules" or "search", followed by
    the strategy's procedure where it has one."""
    spec = strategy(name)
    base = by or ("search" if name == "adversary" else "llm" if spec.needs_llm else "rules")
    return f"{base} ({spec.procedure})" if spec.procedure else base


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy("sentence_deletion", "degradation", False, "delete every other sentence, headers kept",
                 sentence_deletion, judgment_deletion),
        _llm("deletion_completion", "degradation",
             "delete every other sentence, then an LLM fills each gap with a sentence adding nothing"),
        Strategy("random_replacement", "degradation", False, "a review of another paper from the same group"),
        _llm("surface_report", "degradation", "an LLM writes a review from the abstract alone"),
        _llm("ultra_concise", "degradation", "an LLM compresses the review to about 10% of its length"),
        _llm("opinion_flip", "degradation", "an LLM reverses the verdict, structure and topics kept"),
        _llm("rephrase", "manipulation", "an LLM rewrites the review and its judgments, meaning kept", True),
        _llm("meaningless_elongation", "manipulation",
             "the same introductory sentence opens each section of the review form, and an LLM's one-line "
             "summaries of the review's strengths and weaknesses are embedded in it",
             procedure="GEM D.2.2: form-section templates, strength and weakness summaries by this LLM"),
        Strategy("meaningless_elongation_proxy", "manipulation", False,
                 "the same content-free sentences added to every section of every review, no LLM summaries",
                 filler_elongation, judgment_elongation,
                 procedure="proxy of GEM D.2.2: fixed filler, no LLM summaries"),
        _llm("opinion_shift_positive", "manipulation", "an LLM makes the stance more favourable"),
        _llm("opinion_shift_negative", "manipulation", "an LLM makes the stance less favourable"),
        _llm("opinion_shift_hedged", "manipulation", "an LLM turns every claim noncommittal"),
        _llm("opinion_shift_extreme", "manipulation", "an LLM pushes every claim to its strongest form"),
        Strategy("adversary", "manipulation", False, adversary.DESCRIPTION),
        *(Strategy(name, "manipulation", False, text, manipulations.REVIEW_FORMS[name],
                   manipulations.JUDGMENT_FORMS[name]) for name, text in manipulations.DESCRIPTIONS.items()),
        *(_llm(name, "manipulation", text, name == "rephrase_second")
          for name, text in manipulations.LLM_DESCRIPTIONS.items()),
    )
}
# the fixed deterministic strategies (the adversary is deterministic too, but a search: asked for by name)
DETERMINISTIC = tuple(name for name, s in STRATEGIES.items() if not s.needs_llm and name != "adversary")


def strategy(name: str) -> Strategy:
    """The registered strategy of this name, or a ValueError listing the known ones."""
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; known: {', '.join(STRATEGIES)}")
    return STRATEGIES[name]


def check_strategies(names: Sequence[str]) -> tuple[str, ...]:
    """`names` when every one is registered (and there is one at least), else one ValueError naming the rest."""
    unknown = [name for name in names if name not in STRATEGIES]
    if unknown or not names:
        raise ValueError(f"unknown strategy {unknown} (known: {', '.join(STRATEGIES)})")
    return tuple(names)


def perturb_texts(
    name: str,
    texts: Sequence[str | None],
    *,
    target: Target = "review",
    paper_ids: Sequence[str] | None = None,
    groups: Sequence[str] | None = None,
    seed: int = 0,
) -> tuple[list[str | None], list[str | None]]:
    """Apply a deterministic strategy to many texts: (perturbed texts, errors), both in input order.

    A row whose text is missing or empty, or that cannot be perturbed, gets None and an error.
    """
    spec = strategy(name)
    if spec.needs_llm:
        raise ValueError(f"{name} needs an LLM; use tasks.stages.validate.llm_perturb")
    if target not in ("review", "judgments"):
        raise ValueError(f"target must be 'review' or 'judgments', got {target!r}")
    usable = [isinstance(t, str) and bool(t.strip()) for t in texts]
    if name == "random_replacement":
        if paper_ids is None:
            raise ValueError("random_replacement needs paper_ids")
        idx = [i for i, ok in enumerate(usable) if ok]
        drawn = random_replacement([paper_ids[i] for i in idx], [texts[i] for i in idx], seed=seed,
                                   groups=None if groups is None else [groups[i] for i in idx])
        result: list[str | None] = [None] * len(texts)
        for i, text in zip(idx, drawn, strict=True):
            result[i] = text
        errors = [None if r is not None else ("empty text" if not ok else "no other paper in the group")
                  for r, ok in zip(result, usable, strict=True)]
        return result, errors
    fn = spec.review if target == "review" else spec.judgments
    result = [fn(t) if ok else None for t, ok in zip(texts, usable, strict=True)]
    errors = [None if ok else "empty text" for ok in usable]
    return result, errors


def perturb_frame(
    frame: pl.DataFrame,
    name: str,
    *,
    target: Target = "review",
    group_col: str | None = None,
    seed: int = 0,
) -> pl.DataFrame:
    """`frame` (paper_id and the `target` column) with `strategy`, `perturbed` and `perturb_error` added."""
    needed = {"paper_id", target} | ({group_col} if group_col else set())
    missing = needed - set(frame.columns)
    if missing:
        raise ValueError(f"frame lacks columns {sorted(missing)}")
    texts, errors = perturb_texts(
        name, frame[target].to_list(), target=target, paper_ids=frame["paper_id"].to_list(),
        groups=frame[group_col].cast(pl.String).to_list() if group_col else None, seed=seed,
    )
    return frame.with_columns(
        strategy=pl.lit(name),
        perturbed=pl.Series(texts, dtype=pl.String),
        perturb_error=pl.Series(errors, dtype=pl.String),
    )
