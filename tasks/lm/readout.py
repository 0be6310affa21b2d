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

A chat API gives no log-likelihoods, but OpenAI's (and vLLM's) shows the top 20 next tokens after a
prefill (`top_logprobs`); `top_ratings` reads a rating from them (see there for what the top-20 cut
and numbers split into digits mean for it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from tasks.lm.types import (
    ChatRequest,
    ChatResult,
    LanguageModel,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    TopLogprobs,
)


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

# A readout is a rating only where the model put at least this share of its probability at the answer position
# on the scale's values; below it the model was answering something else (a word, a refusal), and renormalising
# the crumbs on the scale would make a number out of noise. Such a readout gives no rating (None: NaN downstream).
MIN_SCALE_MASS = 0.01

@dataclass(frozen=True)
class RatingReadout:
    """A rating read from the answer position: the expectation over the scale, and how much of the
    model's probability there went to an answer on the scale at all (`mass`, in (0, 1])."""

    expected: float
    mass: float
    probabilities: tuple[float, ...]   # over the scale, normalised
    seen: float = 1.0                  # the share of the next-token probability the readout saw (a top-k list: < 1)


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
                     scale: Sequence[int], sep: str = " ", min_mass: float = MIN_SCALE_MASS) -> list[RatingReadout | None]:
    """The rating each (system, user) prompt gets, read at the answer position after `prefill` (e.g.
    "Score:"; one for all prompts or one per prompt) as G-Eval does: the expectation of the scale
    under the model's probabilities of each answer "<prefill><sep><n>", normalised over the scale.
    One log-likelihood request per prompt and rating through `lm.loglikelihood` (the local engine
    computes each prompt once and the answers on its cache); a backend without log-likelihoods
    raises `Unsupported`. None where less than `min_mass` (MIN_SCALE_MASS) of the probability after the
    prefill fell on the scale (with none at all the value would be 0/0)."""
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
        mass = min(1.0, total / head) if head > 0 else math.nan
        if not mass >= min_mass:
            out.append(None)
            continue
        out.append(RatingReadout(float(p @ values), mass, tuple(float(x) for x in p)))
    return out


def _shared_tokens(results: Sequence[LoglikelihoodResult]) -> int:
    """How many leading scored tokens every answer shares (their common prefix, e.g. "Score:")."""
    seqs = [r.token_logprobs or () for r in results]
    n = 0
    while all(len(s) > n + 1 for s in seqs) and all(abs(s[n] - seqs[0][n]) <= 1e-3 for s in seqs):
        n += 1
    return n


# ---- a rating read from a chat API's top next tokens -------------------------------------------

class TopLM(Protocol):
    """What a top-list readout needs of a model: the next tokens' top list after a prefill."""

    def top_logprobs(self, requests: Sequence[ChatRequest]) -> list[TopLogprobs]: ...


READ_TOKENS = 8   # max_tokens of a top-list request (the backend asks only what it needs to reach the position)


def top_ratings(lm: TopLM, prompts: Sequence[tuple[str, str]], prefill: str | Sequence[str],
                scale: Sequence[int], sep: str = " ", calls: list[ChatResult] | None = None,
                min_mass: float = MIN_SCALE_MASS) -> list[RatingReadout | None]:
    """The rating each (system, user) prompt gets from the model's top next tokens after
    "<prefill><sep>" (`lm.top_logprobs`; `Unsupported` where the backend shows none): the expectation
    of the scale under the probabilities of the tokens that spell each value, normalised over the scale.

    What the top list leaves open, and what is done about it:

    * the mass outside the top 20 is unknown: a value not in the list counts 0, the scale is
      normalised over what was seen, `seen` reports the list's share of the probability and `mass`
      the (seen) share on the scale;
    * tokens are compared without their whitespace (" 7" and "7" both spell 7, summed);
    * a value the tokenizer splits ("10" as "1", "0", as SmolLM2's does) is not in the list as a
      whole: where its first token is, one more request after "<prefill><sep>1" gives p("0" | "1"),
      so p(10) = p("1") p("0" | "1") and, as `rating_masses` does, 1 keeps p("1") less p(10). A
      tokenizer with "10" as one token ("10" in the list) needs nothing more: "1" then means 1.

    None where the request failed or less than `min_mass` of the probability fell on the scale. `calls`, when given, receives one
    `ChatResult` per prompt with no text and the tokens its requests cost (for usage and the LLM log)."""
    prefills = [prefill] * len(prompts) if isinstance(prefill, str) else list(prefill)
    heads = [f"{p}{sep}" for p in prefills]
    first = lm.top_logprobs([ChatRequest(s, u, READ_TOKENS, prefill=h) for (s, u), h in zip(prompts, heads, strict=True)])
    seen = [_by_text(r) for r in first]
    words = [str(n) for n in scale]
    splits: list[tuple[int, str, str]] = []   # (prompt, value, its first token in the list)
    for i, probs in enumerate(seen):
        for word in words:
            head = next((t for t in probs if word not in probs and t and len(t) < len(word) and word.startswith(t)), None)
            if head is not None:
                splits.append((i, word, head))
    second = lm.top_logprobs([ChatRequest(*prompts[i], READ_TOKENS, prefill=heads[i] + head)
                              for i, _, head in splits]) if splits else []
    if calls is not None:
        model = str(getattr(lm, "model", ""))
        spent = [[r] for r in first]
        for (i, _, _), more in zip(splits, second, strict=True):
            spent[i].append(more)
        calls.extend(ChatResult("", input_tokens=sum(r.input_tokens for r in rs),
                                output_tokens=sum(r.output_tokens for r in rs),
                                cache_read_tokens=sum(r.cache_read_tokens for r in rs),
                                cached=all(r.cached for r in rs), model=model) for rs in spent)
    values = np.array(scale, dtype=np.float64)
    out: list[RatingReadout | None] = []
    for i, probs in enumerate(seen):
        if first[i].error is not None or not first[i].alternatives:
            out.append(None)
            continue
        mass = {w: probs.get(w, 0.0) for w in words}
        for (j, word, head), more in zip(splits, second, strict=True):
            if j == i:
                mass[word] = probs[head] * _by_text(more).get(word[len(head):], 0.0)
                if head in mass:
                    mass[head] = max(0.0, mass[head] - mass[word])
        total = math.fsum(mass.values())
        if not total > 0.0 or total < min_mass:
            out.append(None)
            continue
        p = np.array([mass[w] for w in words]) / total
        out.append(RatingReadout(float(p @ values), min(1.0, total), tuple(float(x) for x in p),
                                 seen=min(1.0, math.fsum(probs.values()))))
    return out


def _by_text(result: TopLogprobs) -> dict[str, float]:
    """Probability of each token text of a top list, whitespace stripped (" 7" and "7" summed)."""
    probs: dict[str, float] = {}
    for token, logprob in result.alternatives:
        key = token.strip()
        probs[key] = probs.get(key, 0.0) + math.exp(logprob)
    return probs
