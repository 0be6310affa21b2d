"""Answers that loop: a greedy decoder that has repeated one block of tokens several times over.

Small models decoding greedily fall into loops (a sentence, a list item, a run of one token) and
stay there until `max_tokens`: the embedded 135M model does so in most rewrites of a long review,
so nearly all of their decoding time went to text that is rejected as cut off anyway. A row whose
answer ends in a loop stops there and comes back cut off (`ChatResult.truncated`) and marked
(`ChatResult.looped`); an answer that never loops is unchanged to the token.

An answer ends in a loop when, for some period p <= MAX_PERIOD, its last max(REPEATS * p, MIN_TOKENS)
tokens repeat with period p (the last block of p tokens has come at least REPEATS times in a row,
and the repetition spans at least MIN_TOKENS tokens). The watch keeps, per period, how many trailing
tokens equal the token p before them, so each new token costs one vectorised comparison.

Every decoder (the fast loop, the stepwise loop, transformers' `generate`) cuts an answer at the
first token where it loops (`loop_end`), so the three give the same answer, wherever in a drafted
step the loop was noticed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

REPEATS = 4        # the repeated block comes at least this many times in a row
MIN_TOKENS = 64    # and the repetition spans at least this many tokens
MAX_PERIOD = 128   # longest block looked for (a long sentence)
LOOP_RULE = f"loops-{REPEATS}x-{MIN_TOKENS}t-p{MAX_PERIOD}"   # part of a local LM's cache identity


class LoopWatch:
    """Fed an answer token by token, says when its tokens so far end in a loop (module docstring)."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self._history = np.full(MAX_PERIOD, -1, dtype=np.int64)   # ring: the last MAX_PERIOD tokens
        self._run = np.zeros(MAX_PERIOD, dtype=np.int64)          # per period p (index p-1): trailing matches
        self._periods = np.arange(1, MAX_PERIOD + 1)
        self._need = np.maximum(REPEATS * self._periods, MIN_TOKENS) - self._periods

    def add(self, token: int) -> bool:
        """Append one token; True when the answer now ends in a loop."""
        k = len(self.tokens)
        earlier = self._history[(k - self._periods) % MAX_PERIOD]   # the token p positions back, per p
        same = (earlier == token) & (self._periods <= k)
        self._run = np.where(same, self._run + 1, 0)
        self._history[k % MAX_PERIOD] = token
        self.tokens.append(token)
        return bool((self._run >= self._need).any())

    def extend(self, tokens: Sequence[int]) -> int | None:
        """Append tokens; the answer length at the first one that made it loop (None: no loop yet)."""
        for token in tokens:
            if self.add(token):
                return len(self.tokens)
        return None


def loop_end(tokens: Sequence[int]) -> int | None:
    """The length of the shortest prefix of `tokens` that ends in a loop; None when none does."""
    return LoopWatch().extend(tokens)


def loop_criterion(rows: int, prompt_width: int):
    """A stopping criterion for transformers' `generate` over a left-padded batch of `rows` prompts
    `prompt_width` tokens wide: True for each row once its answer loops."""
    import torch
    from transformers import StoppingCriteria

    class Loops(StoppingCriteria):
        def __init__(self) -> None:
            self.watches = [LoopWatch() for _ in range(rows)]
            self.looped = [False] * rows

        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs) -> torch.Tensor:
            for row, watch in enumerate(self.watches):
                if not self.looped[row]:
                    self.looped[row] = watch.extend(input_ids[row, prompt_width + len(watch.tokens):].tolist()) is not None
            return torch.tensor(self.looped, dtype=torch.bool, device=input_ids.device)

    return Loops()


__all__ = ["LOOP_RULE", "LoopWatch", "loop_criterion", "loop_end"]
