"""`[validate]`: the perturbations, the tests of each metric, and the leaderboard's comparisons."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from tasks.core.config_base import Frozen, Seed
from tasks.core.config_llm import LLMConfig


class ValidateConfig(Frozen):
    """The validation workflow (tasks/stages/validate): perturb candidates, rescore, test; and the leaderboard."""

    # names in tasks/stages/validate/strategies.py (checked by tasks/checks.py); the default ones need no LLM (so the
    # elongation is its rule-based proxy; "meaningless_elongation", GEM D.2.2, asks the LLM for two summaries a review)
    strategies: tuple[str, ...] = ("sentence_deletion", "random_replacement", "meaningless_elongation_proxy")
    # any metric names in the registry (tasks/metrics)
    metrics: tuple[str, ...] = ("gem_raw", "gem", "gem_s_abstract", "gem_s_assw", "bleu", "rouge_l", "bertscore_minilm")
    correction: Literal["none", "holm", "bonferroni", "bh"] = "none"  # p-value correction per metric
    alpha: float = Field(0.05, gt=0, lt=1)
    max_papers: int = Field(100, ge=1, le=100_000)       # papers drawn into the validation sample
    candidates: Literal["one", "all"] = "one"  # candidate reviews per paper (the others are references)
    # The reviews validated on: "curated" (the pipeline's curated reviews of its benchmark papers), the name
    # of a sample shipped in tasks/stages/validate/samples/ ("iclr2023_gem": real ICLR 2023 reviews with the
    # GEM release's GPT-4o judgments) or the path of a review file (Parquet or CSV, the columns `grebench
    # validate --reviews` reads), relative to pipelines.toml
    reviews: str = Field("curated", min_length=1)
    seed: Seed = 0                            # sample, candidate choice and random replacement
    leaderboard_confidence: float = Field(0.90, gt=0, lt=1)
    # tests with fewer pairs than this are "inconclusive" (passed null), whatever their p-value
    min_pairs: int = Field(10, ge=2, le=1_000_000)
    correction_scope: Literal["metric", "table"] = "metric"  # correct per metric or over the whole table
    bootstrap_resamples: int = Field(2000, ge=0, le=100_000)  # paired-bootstrap interval of the SMD (0: none)
    adversary_steps: int = Field(4, ge=1, le=100)     # greedy steps of the "adversary" strategy (6 variants each)
    adversary_patience: int = Field(2, ge=1, le=100)  # steps without a gain before a candidate's search stops
    # Papers outside the validation sample, drawn with the seed, on which the adversary searches its recipe; it is
    # then tested on every candidate of the sample, as the other strategies are. 0: the sample's papers are split,
    # the recipe searched on half of them and tested on the other half (tasks/stages/validate/adversary.py). Either
    # way search and test share no paper; tasks/checks.py refuses a config whose test part cannot reach min_pairs.
    adversary_search_papers: int = Field(0, ge=0, le=10_000)
    # "raw": every strategy acts on the raw review, preprocessed afterwards (GEM section 4.2, appendix D), so
    # each metric is tested on the text its board reads; "judgments": the cheaper form, deterministic
    # strategies on the judgment lines, which raw-reading metrics then read; both may run (a string is one level)
    level: tuple[Literal["raw", "judgments"], ...] = ("raw",)
    # Whose judgment lines the judgment metrics compare. "preprocess": every review's, candidates' (original and
    # perturbed) and references' alike, made by the [preprocess] LLM, so both sides of a comparison come from one
    # preprocessor (GEM Algorithm 1: the metric f, preprocessing included, scores both sides). "given": the lines
    # the reviews carry (a shipped sample's or a file's, e.g. the GEM release's GPT-4o lines), a named proxy:
    # candidates perturbed at the raw level are still preprocessed by the [preprocess] LLM, so the two sides may
    # mix preprocessors. "auto": "given" for the pipeline's curated reviews (the preprocess stage wrote their
    # lines), "preprocess" for any other review source.
    judgments: Literal["auto", "preprocess", "given"] = "auto"
    # The LLM that rewrites reviews for the LLM strategies, apart from the one that preprocesses
    # them (GEM uses different LLMs for the two); None: the [preprocess] LLM. Same keys as any backend.
    perturb_llm: LLMConfig | None = None
    # The second rephraser: the "rephrase_second" strategy runs the rephrase prompt on this LLM.
    rephrase_llm: LLMConfig | None = None
    # Paired comparisons of the leaderboard's models (tasks/stages/validate/comparisons.py): a sign-flip
    # test per pair, corrected across a board's pairs; bootstrap intervals at leaderboard_confidence
    compare_correction: Literal["none", "holm", "bonferroni", "bh"] = "holm"
    compare_alpha: float = Field(0.05, gt=0, lt=1)
    compare_resamples: int = Field(2000, ge=100, le=100_000)   # bootstrap replicates over papers

    @model_validator(mode="after")
    def _second_rephraser_configured(self) -> ValidateConfig:
        if "rephrase_second" in self.strategies and self.rephrase_llm is None:
            raise ValueError("strategy rephrase_second needs a [validate.rephrase_llm] table")
        return self

    @field_validator("level", mode="before")
    @classmethod
    def _one_or_more_levels(cls, value: object) -> object:
        if isinstance(value, str):
            return (value,)
        if isinstance(value, list | tuple) and not value:
            raise ValueError('level needs at least one of "raw", "judgments"')
        return value
