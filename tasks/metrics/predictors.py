"""The LLM-oracle predictor: its answers to critic-style and likelihood-style questions.

Two kinds of question (the Scoring Rules paper, section 4.4):

* **critic-style** ("does the candidate support / describe the same thing as this?", Yes or No):
  a local critic t in [-1/2, 1/2] for the f-variational TV estimator;
* **likelihood-style** (how strongly does the candidate support it, on an ordered scale of seven
  support bins "1".."7"): bin b stands for the density ratio r = 2^(b - 4), i.e. 1/8 .. 8, so the
  answer is read as log r for the direct estimators (and the KL f-variational one).

Two implementations, chosen by `Resources.oracle` (`[score] oracle_predictor`):

* `readout`: the evaluation LM's next-token probabilities at the answer position (tasks/lm/readout.py),
  or the mean over a panel of local LMs read the same way (`[score] oracle_readouts`, readout_panel.py).
  Critic: t = P(Yes) / (P(Yes) + P(No)) - 1/2. Bins: the expected log r under the readout's
  distribution over the seven bin tokens, renormalised. Deterministic, no generation.
* `sampled` (the `*_sampled` cells, whatever `oracle_predictor` says): the `[score.oracle]` backend at
  `[score] oracle_temperature`, asked `[score] oracle_repeats` times per question (each draw its own
  request and cache key), the parsed answers averaged: the Scoring Rules paper's variance reduction by
  repeated oracle calls. The readout needs no repeats: it is already the expectation over the answers.
* `generate`: any generation backend (`Resources.llm`, a CachedLM built from `[score.oracle]`),
  greedy / temperature 0, batched and cached like preprocessing. Critic: +1/2 for an answer whose
  first yes/no word is "yes", -1/2 for "no"; bins: the first digit 1-7 of the answer. An answer
  without one (or a failed call) is NaN: recorded in `Resources.log`, never guessed.

Both return a value per question key; questions are deduplicated by the caller.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Literal

import numpy as np
import polars as pl

from tasks.core.schema import ORACLE_REQUESTS, ORACLE_RESULTS
from tasks.metrics.oracle import local_critic
from tasks.metrics.registry import AnswerReadout, MissingResource, Readout, Resources

Kind = Literal["critic", "bins"]
BINS = ("1", "2", "3", "4", "5", "6", "7")
LOG_RATIOS = tuple((int(b) - 4) * math.log(2.0) for b in BINS)   # log of 1/8, 1/4, 1/2, 1, 2, 4, 8
MAX_ANSWER_TOKENS = 8    # a word or a digit; room for a short lead-in such as "Answer: Yes"

_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)
_BIN = re.compile(r"(?<![\d.])([1-7])(?!\d|\.\d)")


def parse_critic(text: str) -> float:
    """+1/2 for yes, -1/2 for no (the first yes/no word of the answer), NaN when there is none."""
    match = _YES_NO.search(text or "")
    return math.nan if match is None else (0.5 if match.group(1).lower() == "yes" else -0.5)


def parse_bin(text: str) -> float:
    """log r of the first bin digit 1-7 standing on its own in the answer, NaN when there is none."""
    match = _BIN.search(text or "")
    return math.nan if match is None else LOG_RATIOS[int(match.group(1)) - 1]


def bins_from_probabilities(probs: np.ndarray) -> np.ndarray:
    """Expected log r of each row of bin probabilities (renormalised over the bins); NaN for a zero row."""
    probs = np.asarray(probs, dtype=np.float64)
    total = probs.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, probs @ np.array(LOG_RATIOS) / total, np.nan)


def oracle_key(resources: Resources) -> str:
    """Names the predictor in score rows (`eval_lm`): readout:<eval LM>, generate:<backend>/<model>, or
    sampled:<backend>/<model>|t=<temperature>|draws=<k> for the sampled cells."""
    if resources.oracle == "sampled":
        from tasks.metrics.panel import model_key

        assert resources.sampler is not None   # checked by the registry
        t = resources.sampler.cfg.temperature
        return (f"sampled:{model_key(resources.sampler)}|t={t if isinstance(t, str) else format(t, 'g')}"
                f"|draws={resources.oracle_repeats}")
    if resources.oracle == "readout":
        from tasks.metrics.readout_panel import panel_name

        return f"readout:{panel_name(resources.readouts) if resources.readouts else resources.eval_lm}"
    from tasks.metrics.panel import panel_key

    return f"generate:{panel_key(resources.panel())}"


def ask(resources: Resources, kind: Kind, questions: Mapping[str, tuple[str, str]], purpose: str) -> dict[str, float]:
    """key -> the oracle's value for each (system, user) question: a local critic or a log ratio (NaN: no answer)."""
    if not questions:
        return {}
    keys = sorted(questions)
    if resources.oracle == "readout":
        return dict(zip(keys, _readout(resources, kind, [questions[k] for k in keys]), strict=True))
    from tasks.metrics.panel import ask_panel

    parse = parse_critic if kind == "critic" else parse_bin
    if resources.oracle == "sampled":   # the sampled cells: k draws of one backend, averaged
        assert resources.sampler is not None   # checked by the registry
        return ask_panel(resources, questions, parse, purpose, MAX_ANSWER_TOKENS, models=(resources.sampler,),
                         repeats=resources.oracle_repeats)
    # one model, or the panel `[score] judges`: each member answers, the values are averaged
    return ask_panel(resources, questions, parse, purpose, MAX_ANSWER_TOKENS)


def _readout(resources: Resources, kind: Kind, prompts: list[tuple[str, str]]) -> list[float]:
    """The evaluation LM's readout, or the mean over the readout panel's members (`[score] oracle_readouts`)."""
    if resources.readouts:
        from tasks.metrics.readout_panel import average

        return average(resources.readouts, lambda m: _read_one(m.readout, m.read_answers, kind, prompts))
    return _read_one(resources.readout, resources.read_answers, kind, prompts)


def _read_one(readout: Readout | None, read_answers: AnswerReadout | None, kind: Kind,
              prompts: list[tuple[str, str]]) -> list[float]:
    if kind == "critic":
        assert readout is not None   # checked by the registry
        frame = pl.DataFrame([{"key": str(i), "system": s, "user": u} for i, (s, u) in enumerate(prompts)],
                             schema=ORACLE_REQUESTS)
        got = readout(frame).cast(dict(ORACLE_RESULTS))
        by_key = {k: local_critic(y, n) for k, y, n in got.select("key", "p_yes", "p_no").iter_rows()}
        if len(by_key) != len(prompts):
            raise ValueError(f"the readout answered {len(by_key)} of {len(prompts)} oracle questions")
        return [by_key[str(i)] for i in range(len(prompts))]
    if read_answers is None:
        raise MissingResource("the likelihood-style oracle cells need the evaluation LM's readout over "
                              "the bin answers (Resources.read_answers)")
    return bins_from_probabilities(read_answers(prompts, BINS)).tolist()
