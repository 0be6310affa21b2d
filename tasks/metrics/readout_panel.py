"""A panel of logit-readout oracles: several local LMs read by their logits, their values averaged.

`[score] oracle_readouts` names the members (with `oracle_predictor = "readout"`): a list of local
LMs with the keys of `[score] eval_lms` entries, or "eval_lms" for the evaluation LMs of the run;
left empty, the first evaluation LM is the oracle alone (as before). Each member answers every
oracle question through its own readout (tasks/lm/readout.py): the critic t = P(Yes) / (P(Yes) +
P(No)) - 1/2, or the expected log ratio over the seven support bins. A question's value is the mean
over the members that gave a number (`panel.mean_of_members`, as the generation panel averages),
NaN when none did. The members run one after the other, each over all questions, so a panel needs
one model in memory at a time (the local-LM cache keeps two; a third member reloads on each call).

The score rows name the panel in `eval_lm` ("readout:<key>+<key>"), which the leaderboard's
predictor column shows; the qualify stage examines each member as its own oracle seat and drops the
members that fail (`tasks.stages.qualify.stage.qualified_config`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from tasks.core.config import EvalLMConfig, ScoreConfig
from tasks.core.schema import ORACLE_RESULTS
from tasks.lm import eval_model
from tasks.metrics.panel import mean_of_members
from tasks.metrics.registry import AnswerReadout, ReadoutMember

if TYPE_CHECKING:
    from tasks.lm import ModelSpec


def readout_entries(cfg: ScoreConfig) -> tuple[EvalLMConfig, ...]:
    """The members as config entries ("eval_lms": those of eval_lms, or the single evaluation LM)."""
    if cfg.oracle_readouts != "eval_lms":
        return cfg.oracle_readouts
    return cfg.eval_lms or (EvalLMConfig(eval_lm=cfg.eval_lm, eval_lm_cuda=cfg.eval_lm_cuda, dtype=cfg.dtype,
                                         quantization=cfg.quantization),)


def readout_specs(cfg: ScoreConfig) -> list[ModelSpec]:
    """The members' model specs, in config order; [] when no panel is configured. One model named
    twice is an error (as in eval_lms)."""
    from tasks.lm import eval_specs

    entries = readout_entries(cfg)
    return eval_specs(cfg.model_copy(update={"eval_lms": entries})) if entries else []


def readout_members(cfg: ScoreConfig) -> tuple[ReadoutMember, ...]:
    """The panel's members as Resources carry them (each loads its model on first use)."""
    return tuple(ReadoutMember(s.resolved().key, engine_readout(s, cfg.token_budget),
                               engine_answers(s, cfg.token_budget)) for s in readout_specs(cfg))


def panel_name(members: Sequence[ReadoutMember]) -> str:
    """"<key>+<key>": the members in config order."""
    return "+".join(m.key for m in members)


def average(members: Sequence[ReadoutMember], read: Callable[[ReadoutMember], list[float]]) -> list[float]:
    """Each question's mean over the members' values (`read(member)`: one value per question, NaN: none)."""
    per_member = [read(m) for m in members]
    if not per_member:
        raise ValueError("an empty readout panel")
    sizes = {len(v) for v in per_member}
    if len(sizes) != 1:
        raise ValueError(f"the panel's members answered different numbers of questions: {sorted(sizes)}")
    return [mean_of_members([v[i] for v in per_member]) for i in range(sizes.pop())]


def engine_readout(spec: ModelSpec, token_budget: int = 4096, answers: tuple[str, str] = ("Yes", "No"),
                   cache_dir: Path | None = None):
    """ORACLE_REQUESTS -> ORACLE_RESULTS: P(Yes), P(No) read from the evaluation LM's next-token
    distribution (tasks/lm/readout.py): local weights in this process, or its completions server
    (answers cached under `cache_dir` when given)."""
    def read(requests: pl.DataFrame) -> pl.DataFrame:
        from tasks.lm.readout import answer_probabilities

        probs = answer_probabilities(eval_model(spec, token_budget, cache_dir),
                                     list(requests.select("system", "user").iter_rows()), answers)
        return pl.DataFrame({"key": requests["key"], "p_yes": probs[:, 0], "p_no": probs[:, 1]}, schema=ORACLE_RESULTS)
    return read


def engine_answers(spec: ModelSpec, token_budget: int = 4096, cache_dir: Path | None = None) -> AnswerReadout:
    """(prompts, answers) -> the evaluation LM's probabilities of each answer's first token after each
    prompt (tasks/lm/readout.py), locally or through its completions server: the oracle's support bins."""
    def read(prompts: Sequence[tuple[str, str]], answers: Sequence[str]) -> np.ndarray:
        from tasks.lm.readout import answer_probabilities

        return answer_probabilities(eval_model(spec, token_budget, cache_dir), list(prompts), answers)
    return read
