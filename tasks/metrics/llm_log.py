"""What the metrics' LLM calls cost and what they answered, collected while a run scores.

Metrics that ask a generation backend (the generation oracle, the LLM judges) record here, per
purpose (`oracle:<kind>` or `judge:<metric>`, naming the metrics the calls serve), the USAGE row
of their calls (requests, cache hits, errors, tokens, cost at the configured prices), and each
answer with the value read from it. An answer that does not parse is kept with a null value: the
pair it belongs to gets a NaN score with a reason, never a made-up value. The score stage writes
both frames (score/usage.parquet -> the `llm_usage` table, score/llm_answers.parquet).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from tasks.core.schema import USAGE

if TYPE_CHECKING:
    from tasks.core.config import LLMConfig
    from tasks.lm.types import ChatResult

# One row per distinct question asked: the answer's text, the value read from it (null: unparsed or failed).
LLM_ANSWERS = pl.Schema({"purpose": pl.String, "key": pl.String, "model": pl.String, "answer": pl.String,
                         "value": pl.Float64, "error": pl.String, "cached": pl.Boolean})


class LLMLog:
    """USAGE rows and answers of the metrics' LLM calls; thread-safe, appended to by the families."""

    def __init__(self) -> None:
        self._usage: list[dict] = []
        self._answers: list[dict] = []
        self._lock = threading.Lock()

    def record(self, purpose: str, backend: str, model: str, cfg: LLMConfig, keys: Sequence[str],
               results: Sequence[ChatResult], values: Sequence[float | None]) -> None:
        from tasks.lm.types import Usage

        usage = Usage.of(results, cfg).as_dict()
        answers = [{"purpose": purpose, "key": k, "model": r.model or model, "answer": r.text, "value": v,
                    "error": r.error, "cached": r.cached} for k, r, v in zip(keys, results, values, strict=True)]
        with self._lock:
            self._usage.append({"purpose": purpose, "backend": backend, "model": model, **usage})
            self._answers += answers

    def add(self, usage: pl.DataFrame, answers: pl.DataFrame) -> None:
        """Another log's USAGE rows and answers (a metric shard's, read back from its files)."""
        with self._lock:
            self._usage += usage.select(USAGE.names()).to_dicts()
            self._answers += answers.select(LLM_ANSWERS.names()).to_dicts()

    def usage(self) -> pl.DataFrame:
        """USAGE: one row per purpose (calls of the same purpose in one run added up)."""
        with self._lock:
            frame = pl.DataFrame(self._usage, schema=USAGE) if self._usage else pl.DataFrame(schema=USAGE)
        sums = [pl.col(c).sum() for c in USAGE.names() if c not in ("purpose", "backend", "model")]
        return frame.group_by("purpose", "backend", "model", maintain_order=True).agg(sums).select(USAGE.names())

    def answers(self) -> pl.DataFrame:
        with self._lock:
            return pl.DataFrame(self._answers, schema=LLM_ANSWERS) if self._answers else pl.DataFrame(schema=LLM_ANSWERS)


def write_llm_log(log: LLMLog, folder: Path) -> dict[str, int | float]:
    """<folder>/usage.parquet (USAGE, read into the `llm_usage` table) and <folder>/llm_answers.parquet,
    when the metrics made LLM calls; the StageSummary LLM fields (calls made, tokens, cost)."""
    from tasks.core.layout import write_parquet

    usage, answers = log.usage(), log.answers()
    if usage.height:
        write_parquet(usage, folder / "usage.parquet")
        write_parquet(answers, folder / "llm_answers.parquet")
    return {"llm_calls": int((usage["requests"] - usage["cached"]).sum()), "input_tokens": int(usage["input_tokens"].sum()),
            "output_tokens": int(usage["output_tokens"].sum()), "cost_usd": float(usage["cost_usd"].sum())}
