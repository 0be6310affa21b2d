"""`[preprocess]`: the LLM that turns reviews into judgment lines and papers into synopses."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tasks.core.config_llm import LLMConfig

Unit = Literal["auto", "review", "sentence"]
Sentences = Literal["evaluations", "all"]


class PreprocessConfig(LLMConfig):
    # "review": the whole review in one request, the LLM writes every line (GEM appendix C.1, for a large
    # model); "sentence": the review's sentences, the LLM reads each one's opening (tasks/judgments/sentences.py,
    # for a small local model); "auto": "sentence" for the local backend, "review" for the others
    unit: Unit = "auto"
    # which sentences the "sentence" unit reads: "evaluations", the first sentence of each paragraph or list item
    # and every question (GEM C.1 summarises each evaluation; the sentences after an item's first elaborate it);
    # "all": every sentence outside the paper's summary (more lines, fewer of them GPT-4o's)
    sentences: Sentences = "evaluations"
    prompt_version: str = "judgments-v1"            # the "review" unit's prompt
    sentence_prompt_version: str = "judgments-v2"   # the "sentence" unit's prompt
    synopsis_prompt_version: str = "assw-v1"
    max_paper_chars: int = Field(60_000, ge=1000, le=10_000_000)  # paper text fed to the ASSW summary
    allow_empty: bool = False  # no judgments at all (every review failed) is an error unless true

    @property
    def judgment_unit(self) -> Literal["review", "sentence"]:
        """The unit this config preprocesses by ("auto" resolved by the backend)."""
        if self.unit != "auto":
            return self.unit
        return "sentence" if self.backend == "local" else "review"

    @property
    def judgment_prompt(self) -> str:
        """The prompt version of the judgments this config writes."""
        return self.sentence_prompt_version if self.judgment_unit == "sentence" else self.prompt_version

    @property
    def preprocessor(self) -> str:
        """Who wrote the judgment lines, as the outputs name it: model, unit and prompt version."""
        if self.judgment_unit == "sentence":
            read = "evaluations" if self.sentences == "evaluations" else "every sentence"
            return f"{self.model} (sentence unit, {read}, {self.judgment_prompt})"
        return f"{self.model} (review unit, {self.judgment_prompt})"
