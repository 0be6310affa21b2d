"""What every stage flow returns: a typed summary that the `runs` table reads.

`rows_in` / `rows_out` are the stage's unit of work (reviews in and kept for curate, requests and
score rows for score, ...); `details` keeps whatever else the stage wants to report (per venue
figures, gaps, file paths) for the CLI's JSON output. Summaries of parts of a stage add up with
`+` (per venue, per candidate).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl


@dataclass(frozen=True)
class StageSummary:
    rows_in: int
    rows_out: int
    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    def __add__(self, other: StageSummary) -> StageSummary:
        return StageSummary(
            rows_in=self.rows_in + other.rows_in,
            rows_out=self.rows_out + other.rows_out,
            llm_calls=self.llm_calls + other.llm_calls,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cost_usd=self.cost_usd + other.cost_usd,
            details={**self.details, **other.details},
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "rows_in": self.rows_in, "rows_out": self.rows_out, "llm_calls": self.llm_calls,
            "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
            "cost_usd": round(self.cost_usd, 6), **self.details,
        }


def llm_figures(usage: pl.DataFrame) -> dict[str, Any]:
    """The StageSummary LLM fields from a USAGE frame: calls made (cache hits excluded), tokens, cost."""
    return {
        "llm_calls": int((usage["requests"] - usage["cached"]).sum()),
        "input_tokens": int(usage["input_tokens"].sum()),
        "output_tokens": int(usage["output_tokens"].sum()),
        "cost_usd": float(usage["cost_usd"].sum()),
    }
