"""A panel of LLMs in a judging role: every member answers the same questions, the values are averaged.

`[score] judges` lists the backends of the panel (any LLMConfig keys each); left empty, the
`[score.oracle]` backend judges alone. The LLM judges (tasks/metrics/judge.py), the generation
oracle (tasks/metrics/predictors.py) and the RevisEval judge (tasks/metrics/reviseval.py) ask
their questions through `ask_panel`: each member answers every question (batched and cached by
its CachedLM), each answer is parsed into a value, and a question's value is the mean over the
members that gave one, weighted by each member's Auto-PRE fusion weight (`[score] judge_weights`,
filled from the qualification exam: the mean of the member's consistency, pertinence and
self-confidence scores; 1 for a member without one, so no exam means the plain mean). A member whose answer does not parse leaves the mean to the others; a
question no member answered is NaN, never a guess. A call that failed transiently (rate limit,
overload, 5xx) after the backend's retries raises `TransientLLMError`: the stage retries it. Each member's calls are recorded in the LLM
log under the purpose, so usage and answers stay per model.

The score rows name the panel in `eval_lm` (`panel_key`: "anthropic/a+openai/b"), which the
leaderboard's predictor column shows: the judges used are on the board. The LLM judges of a panel of
two or more also write each member's own rating (`member_rows`: its name in `eval_lm`, `note`
"panel_member"), so the board shows each member's column beside the panel's weighted one; validation
rescores the panel's score alone (tasks/stages/validate/rescore.py drops the member rows).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from tasks.metrics.registry import MEMBER_NOTE

if TYPE_CHECKING:
    from tasks.metrics.registry import ChatLM, Resources




def model_key(llm: ChatLM) -> str:
    return f"{llm.name}/{llm.model}"


def panel_key(models: Sequence[ChatLM]) -> str:
    """The models of a panel, in config order: "backend/model+backend/model"."""
    return "+".join(model_key(m) for m in models)


def mean_of_members(values: Sequence[float], weights: Sequence[float] | None = None) -> float:
    """The (weighted) mean of the members' values that are numbers; NaN when none is (or when every
    member that answered weighs 0)."""
    weights = weights if weights is not None else [1.0] * len(values)
    kept = [(v, w) for v, w in zip(values, weights, strict=True) if not math.isnan(v)]
    total = sum(w for _, w in kept)
    return sum(v * w for v, w in kept) / total if kept and total > 0 else math.nan


def member_rows(rows: Sequence[dict], keys: Sequence[str | None], members: Sequence[tuple[str, Mapping[str, float]]],
                unanswered: str) -> list[dict]:
    """Each member's copy of a panel's score rows, for a panel of two or more (none for one: its row is
    the panel's): `rows[i]` asked question `keys[i]` (None: not asked, its reason kept); the copy has the
    member's own rating, its name in `eval_lm`, the reason `unanswered` where it gave none, and `note`
    MEMBER_NOTE."""
    if len(members) < 2:
        return []
    out = []
    for name, values in members:
        for row, key in zip(rows, keys, strict=True):
            score = values[key] if key is not None else math.nan
            reason = row["reason"] if key is None else unanswered if math.isnan(score) else None
            out.append({**row, "eval_lm": name, "score": score, "reason": reason, "note": MEMBER_NOTE})
    return out


def member_weight(resources: Resources, llm: ChatLM) -> float:
    """A panel member's fusion weight (`Resources.panel_weights`, by "backend/model"; 1 without one)."""
    return float(resources.panel_weights.get(f"{llm.cfg.backend}/{llm.cfg.model}", 1.0))


def ask_panel(resources: Resources, questions: Mapping[str, tuple[str, str]], parse: Callable[[str], float],
              purpose: str, max_tokens: int, prefill: str = "", models: Sequence[ChatLM] | None = None,
              repeats: int = 1) -> dict[str, float]:
    """key -> the panel's mean value for each (system, user) question (NaN where no member answered);
    `prefill` is the answer's forced start (e.g. "Score:"), so a small model answers in the format.
    `models`: who answers (default: the judging role's panel). `repeats`: draws per question and member
    (each its own request, `ChatRequest.sample`, cached under its own key), a member's value the mean of
    its draws that parse: the Scoring Rules paper's variance reduction by repeated oracle calls."""
    from tasks.lm.ask import raise_if_transient
    from tasks.lm.types import ChatRequest

    if not questions:
        return {}
    keys = sorted(questions)
    members = tuple(models) if models is not None else resources.panel()
    per_member: list[list[float]] = []
    for llm in members:
        asked = [(k, draw) for k in keys for draw in range(repeats)]
        results = llm.generate([ChatRequest(*questions[k], max_tokens=max_tokens, custom_id=_custom_id(k, draw),
                                            prefill=prefill, sample=draw) for k, draw in asked])
        values = [parse(r.text) if r.error is None else math.nan for r in results]
        resources.log.record(purpose, llm.name, llm.model, llm.cfg, [k if not d else f"{k}|draw={d}" for k, d in asked], results,
                             [None if math.isnan(v) else v for v in values])
        raise_if_transient(results)   # a 429 / 5xx is retried by the stage's task, never scored NaN
        per_member.append([mean_of_members(values[i * repeats:(i + 1) * repeats]) for i in range(len(keys))])
    if not per_member:
        raise ValueError("no model in the judging role (neither [score] judges nor [score.oracle])")
    weights = [member_weight(resources, llm) for llm in members]
    return {k: mean_of_members([member[i] for member in per_member], weights) for i, k in enumerate(keys)}


def _custom_id(key: str, draw: int) -> str:
    """A request's id in a batch and in the LLM log: the question key, with the draw after the first."""
    return key[:64] if not draw else f"{key[:56]}-d{draw}"
