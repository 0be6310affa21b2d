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

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from tasks.lm.types import LoglikelihoodRequest, LoglikelihoodResult


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
