"""A chat backend built on its first call: a run that never asks it needs no API key for it.

The metrics' judges, oracle and reviser (tasks/metrics/resources.py), the review-quality LLM
(tasks/metrics/quality.py) and the qualification exam's seats all hold one.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tasks.core.config import LLMConfig
    from tasks.lm.cache import CachedLM
    from tasks.lm.types import (
        Accept,
        ChatRequest,
        ChatResult,
        LoglikelihoodRequest,
        LoglikelihoodResult,
        TopLogprobs,
    )


class LazyLM:
    """`make_lm(cfg, cache_dir)`, built on the first `generate` (an API backend checks its key then)."""

    def __init__(self, cfg: LLMConfig, cache_dir: Path) -> None:
        self.cfg = cfg
        self.cache_dir = Path(cache_dir)
        self.name = cfg.backend
        self.model = cfg.model
        self._lm: CachedLM | None = None
        self._lock = threading.Lock()

    @property
    def lm(self) -> CachedLM:
        with self._lock:
            if self._lm is None:
                from tasks.lm import make_lm

                self._lm = make_lm(self.cfg, self.cache_dir)
            return self._lm

    def generate(self, requests: Sequence[ChatRequest], accept: Accept | None = None) -> list[ChatResult]:
        return self.lm.generate(requests, accept)

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        """The backend's log-likelihoods (the judges' rating readout); `Unsupported` where it has none."""
        return self.lm.loglikelihood(requests)

    def top_logprobs(self, requests: Sequence[ChatRequest]) -> list[TopLogprobs]:
        """The next tokens' top list after each prefill (a chat API's readout); `Unsupported` where it has none."""
        return self.lm.top_logprobs(requests)
