"""Logit readout: an LLM oracle's answer read from the evaluation LM's next-token distribution.

Instead of generating "Yes" or "No" and parsing it, the oracle's answer is the probability the
evaluation LM puts on each answer's first token at the position where its answer begins (the chat
template's generation prompt): the full-vocabulary softmax at that position, deterministic, batched,
no generation. It is a log-likelihood operation, so it runs wherever log-likelihoods run:

* a local LM: the log-likelihood engine (tasks/lm/loglikelihood.py) computes each distinct prompt
  once and lets every answer of that prompt reuse its KV cache, so k answers cost one pass over the
  prompt plus k one-token steps;
* a completions server (tasks/lm/completions.py): one echoed (prompt + answer) per answer, in the
  same batched, retried, cached requests as every other log-likelihood. The echoed log-probability
  of the answer's first token is read whatever its rank, so no top-k limit of the server (OpenAI 5,
  vLLM 20 by default) can hide an option.

Either way the first scored value of a request is exactly log softmax(logits)[first token of the
answer]. The answers must start with different tokens (else the readout could not tell them apart),
which `first_tokens` checks for the model's tokenizer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from tasks.lm.types import LanguageModel, LoglikelihoodRequest, LoglikelihoodResult


class ReadoutLM(Protocol):
    """What a readout needs of a model: its tokenizer and log-likelihoods with per-token values."""

    @property
    def tokenizer(self) -> object: ...

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[LoglikelihoodResult]: ...


def first_tokens(tokenizer: object, answers: Sequence[str]) -> list[int]:
    """The first token id of each answer (tokenized on its own, as the engine does); distinct or an error."""
    ids = [tokenizer(a, add_special_tokens=False)["input_ids"][0] for a in answers]  # type: ignore[operator]
    if len(set(ids)) != len(ids):
        raise ValueError(f"answers {list(answers)} share a first token under this tokenizer: no readout possible")
    return ids


def answer_probabilities(lm: ReadoutLM, prompts: Sequence[tuple[str, str]], answers: Sequence[str]) -> np.ndarray:
    """(len(prompts) x len(answers)) probabilities of each answer's first token after each (system, user)
    prompt, under the full-vocabulary softmax (they need not sum to one over the answers)."""
    first_tokens(lm.tokenizer, answers)
    requests = [LoglikelihoodRequest(system, user, answer) for system, user in prompts for answer in answers]
    results = lm.loglikelihood(requests)
    firsts = [r.token_logprobs[0] for r in results]  # type: ignore[index]
    return np.exp(np.array(firsts, dtype=np.float64)).reshape(len(prompts), len(answers))


# ---- a rating read as an expectation (G-Eval) --------------------------------------------------

@dataclass(frozen=True)
class RatingReadout:
    """A rating read from the answer position: the expectation over the scale, and how much of the
    model's probability there went to an answer on the scale at all (`mass`, in (0, 1])."""

    expected: float
    mass: float
    probabilities: tuple[float, ...]   # over the scale, normalised


def rating_masses(answers: Sequence[str], token_logprobs: Sequence[Sequence[float]],
                  tol: float = 1e-3) -> np.ndarray:
    """The probability of each rating as a whole number, from its answer's scored tokens (the
    continuation's tokens then the end-of-turn token, as the log-likelihood engine scores them).

    An answer's text probability is the product of its tokens' probabilities, end of turn left out.
    Where the tokenizer splits numbers ("10" as "1" then "0"), the answer for 1 is a token prefix of
    the answer for 10, so p("1") holds p("10") as well: each rating keeps only what no longer answer
    of the scale extends. Prefixes are found from the texts and the tokens: a longer answer extends a
    shorter one when its text starts with the other's and its first tokens scored the same values."""
    lps = [tuple(t[:-1]) for t in token_logprobs]                 # the end-of-turn token is not the answer's
    text_p = np.exp(np.array([math.fsum(t) for t in lps], dtype=np.float64))
    mass = text_p.copy()
    for i, (a, la) in enumerate(zip(answers, lps, strict=True)):
        for j, (b, lb) in enumerate(zip(answers, lps, strict=True)):
            extends = (j != i and b.startswith(a) and len(lb) > len(la)
                       and all(abs(x - y) <= tol for x, y in zip(la, lb[: len(la)], strict=False)))
            between = any(len(a) < len(c) < len(b) and b.startswith(c) and c.startswith(a) for c in answers)
            if extends and not between:   # only the nearest extensions ("1" -> "10", not "1" -> "100")
                mass[i] -= text_p[j]
    return np.clip(mass, 0.0, None)


def expected_ratings(lm: LanguageModel, prompts: Sequence[tuple[str, str]], prefill: str | Sequence[str],
                     scale: Sequence[int], sep: str = " ") -> list[RatingReadout | None]:
    """The rating each (system, user) prompt gets, read at the answer position after `prefill` (e.g.
    "Score:"; one for all prompts or one per prompt) as G-Eval does: the expectation of the scale
    under the model's probabilities of each answer "<prefill><sep><n>", normalised over the scale.
    One log-likelihood request per prompt and rating through `lm.loglikelihood` (the local engine
    computes each prompt once and the answers on its cache); a backend without log-likelihoods
    raises `Unsupported`. None where no mass at all fell on the scale (the value would be 0/0)."""
    prefills = [prefill] * len(prompts) if isinstance(prefill, str) else list(prefill)
    per_prompt = [[f"{p}{sep}{n}" for n in scale] for p in prefills]
    requests = [LoglikelihoodRequest(system, user, answer)
                for (system, user), answers in zip(prompts, per_prompt, strict=True) for answer in answers]
    results = lm.loglikelihood(requests) if requests else []
    out: list[RatingReadout | None] = []
    values = np.array(scale, dtype=np.float64)
    for i, answers in enumerate(per_prompt):
        chunk = results[i * len(answers):(i + 1) * len(answers)]
        if any(r.token_logprobs is None for r in chunk):
            raise ValueError(f"{lm.model}: log-likelihood results without per-token values; no rating readout")
        masses = rating_masses(answers, [r.token_logprobs for r in chunk])   # type: ignore[misc]
        total = float(masses.sum())
        if not total > 0.0 or not math.isfinite(total):
            out.append(None)
            continue
        p = masses / total
        # the answers' shared start ("Score:") has the same probability in every answer: the mass
        # on the scale is relative to it
        head = math.exp(math.fsum(chunk[0].token_logprobs[: _shared_tokens(chunk)]))   # type: ignore[index]
        out.append(RatingReadout(float(p @ values), min(1.0, total / head) if head > 0 else math.nan,
                                 tuple(float(x) for x in p)))
    return out


def _shared_tokens(results: Sequence[LoglikelihoodResult]) -> int:
    """How many leading scored tokens every answer shares (their common prefix, e.g. "Score:")."""
    seqs = [r.token_logprobs or () for r in results]
    n = 0
    while all(len(s) > n + 1 for s in seqs) and all(abs(s[n] - seqs[0][n]) <= 1e-3 for s in seqs):
        n += 1
    return n
