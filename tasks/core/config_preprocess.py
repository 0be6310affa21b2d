"""`[preprocess]`: the LLM that turns reviews into judgment lines and papers into synopses."""

from __future__ import annotations

from pydantic import Field

from tasks.core.config_llm import LLMConfig


class PreprocessConfig(LLMConfig):
    prompt_version: str = "judgments-v1"
    synopsis_prompt_version: str = "assw-v1"
    max_paper_chars: int = Field(60_000, ge=1000, le=10_000_000)  # paper text fed to the ASSW summary
    allow_empty: bool = False  # no judgments at all (every review failed) is an error unless true
