"""`[score]`: the evaluation LMs, the metrics and what they read (oracle, judges, reviser, BARTScore,
the review-quality work, the reference flags)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from tasks.core.config_base import Frozen, Seed
from tasks.core.config_llm import LLMConfig


class EvalLMConfig(Frozen):
    """One entry of `[score] eval_lms`: the same keys as the single evaluation LM of [score]."""

    eval_lm: str = "smollm2"                 # "smollm2" (embedded), a local path or a model id
    eval_lm_cuda: str | None = None          # used instead when CUDA is present (None: eval_lm there too)
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    quantization: Literal["auto", "none", "nf4"] = "auto"
    # an OpenAI-compatible completions server holding this evaluation LM (the keys of [score.eval_server]): a
    # second, different model beside a local one, for GEM section 4.4's cross-LM consistency; eval_lm is then unused
    server: LLMConfig | None = None

    @field_validator("server")
    @classmethod
    def _a_completions_server(cls, value: LLMConfig | None) -> LLMConfig | None:
        if value is not None and (value.backend != "openai" or value.api != "completions"):
            raise ValueError('an evaluation LM server needs backend = "openai" and api = "completions"')
        return value


class ReviewQualityConfig(Frozen):
    """`[score.review_quality]`: Beyond Rating's review-quality metrics and the rating outcomes
    (tasks/metrics/review_quality, tasks/metrics/quality.py)."""

    # The LLM that splits reviews into atomic points, matches points and checks questions (any
    # backend's keys); unset: the [preprocess] backend
    llm: LLMConfig | None = None
    # None: every (candidate point, human point) pair goes to the match judge, as Beyond Rating's precision and
    # Max-Recall are defined (eq. 2-3); k: only the k most similar by embedding, the rest counted unmatched, which
    # makes both lower bounds (their score rows' eval_lm says "prefilter top-k, lower bound")
    match_top_k: int | None = Field(None, ge=1, le=1000)
    points_max_tokens: int = Field(768, ge=16, le=1_000_000)  # answer budget of one review field's atomic points
    kl_alpha: float = Field(1.0, gt=0)         # additive smoothing of the focus-KL category counts
    chunk_tokens: int = Field(512, ge=16, le=1_000_000)      # paper chunks: window in words ...
    chunk_overlap: int = Field(128, ge=0, le=1_000_000)      # ... and overlap in words
    chunk_top_k: int = Field(5, ge=1, le=1000)          # chunks a summary's coverage sums / a question is checked against
    accept_threshold: float = 6.0              # a candidate rating at or above it predicts accept (common scale)
    # Binoculars: two local causal LMs sharing one tokenizer (observer, performer); unset: NaN with the reason.
    # One model twice is the single-model form (its log-perplexity over its own entropy), as the reference
    # flags use it where only one LM is at hand (the demo); the paper's classifier uses two
    binoculars_observer: str | None = None
    binoculars_performer: str | None = None
    # ai_rate: a review whose Binoculars score is below this is counted as AI-written (Beyond Rating's
    # classification threshold, paper 003 section 4.6, for the two-model form). With one LM as observer
    # and performer (the single-model form) `ai_single_threshold` applies instead, written by
    # `grebench calibrate binoculars --target review_quality`; unset: ai_rate is NaN (`binoculars_uncalibrated`)
    ai_threshold: float = 0.9015
    ai_single_threshold: float | None = None
    ai_single_threshold_source: str | None = None
    # The point matcher M(a, h) apart from `llm` (any backend's keys each), in order of preference: the
    # first listed matches; the qualify stage examines each (role "matcher") and drops those that fail.
    # Empty: `llm` (else [preprocess]) matches, and is the one examined
    matchers: tuple[LLMConfig, ...] = ()

    @model_validator(mode="after")
    def _chunks_and_pair(self) -> ReviewQualityConfig:
        if self.chunk_overlap >= self.chunk_tokens:
            raise ValueError("chunk_overlap must be smaller than chunk_tokens")
        if (self.binoculars_observer is None) != (self.binoculars_performer is None):
            raise ValueError("binoculars needs both binoculars_observer and binoculars_performer, or neither")
        return self


class ReferenceFlagsConfig(Frozen):
    """`[score.reference_flags]`: a Binoculars AI-likelihood score for every human reference (Beyond
    Rating, paper 003, section 4.6), so the leaderboard can be read without the references an LLM
    may have written (tasks/stages/score/reference_flags.py)."""

    enabled: bool = True
    # The observer and performer causal LMs (sharing one tokenizer); unset observer: the evaluation LM
    # ([score] eval_lm, eval_lm_cuda on CUDA); unset performer: the observer itself (one LM: its
    # log-perplexity over its own entropy, the pair collapsed to one model)
    observer: str | None = None
    performer: str | None = None
    # A reference whose Binoculars score is below the threshold of its form is flagged as likely
    # AI-written. The two-model form (observer and performer differ): `threshold`, by default Hans et
    # al. 2024's low false-positive threshold for their Falcon-7B / Falcon-7B-instruct pair. The
    # single-model form (one LM as both) has no published threshold: `single_threshold`, written by
    # `grebench calibrate binoculars` from labelled reviews at a stated false-positive rate; unset, the
    # scores are kept and nothing is flagged (reason `binoculars_uncalibrated`). The sources are shown
    # beside each flag (`reference_flags.threshold_source`).
    threshold: float = 0.9015
    threshold_source: str = "Hans et al. 2024, two-model form (Falcon-7B / Falcon-7B-instruct)"
    single_threshold: float | None = None
    single_threshold_source: str | None = None

    def for_form(self, single: bool) -> tuple[float | None, str]:
        """(threshold, its source) of the Binoculars form in use; None where that form has none."""
        if not single:
            return self.threshold, self.threshold_source
        if self.single_threshold is None:
            return None, "none: the single-model form is not calibrated (grebench calibrate binoculars)"
        return self.single_threshold, self.single_threshold_source or "set by hand"


class ScoreConfig(Frozen):
    eval_lm: str = "smollm2"              # "smollm2" (embedded), a local path or a model id
    eval_lm_cuda: str = "meta-llama/Llama-3.1-8B-Instruct"  # used instead when CUDA is present
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    quantization: Literal["auto", "none", "nf4"] = "auto"   # auto: nf4 on CUDA, none on CPU
    token_budget: int = Field(4096, ge=64, le=10_000_000)   # tokens per forward batch
    shard_size: int = Field(256, ge=1, le=1_000_000)       # scoring requests per Parquet shard
    metric_shard_papers: int = Field(8, ge=1, le=100_000)   # papers per shard of the LLM metrics (tasks/scoring/metric_shards.py)
    task_runner: Literal["thread", "dask"] = "thread"
    workers: int = Field(1, ge=1, le=1024)            # workers of the dask cluster started locally (on a CPU)
    runner_address: str | None = None        # an existing dask scheduler (its workers hold a GPU resource each)
    # The GPUs of a dask cluster started locally, one worker each (as CUDA_VISIBLE_DEVICES names them:
    # indices or UUIDs); empty: every GPU this process sees (tasks/scoring/cluster.py)
    cuda_devices: tuple[str, ...] = ()
    gpu_concurrency: int = Field(1, ge=1, le=1024)    # scoring tasks allowed at once (the thread runner's slot files)
    slot_wait_s: float = Field(3600.0, gt=0, le=30 * 86400)   # longest wait for one of those slots (tasks/core/slots.py)
    metrics: tuple[str, ...] = ("gem_raw", "gem", "gem_s_abstract", "gem_s_assw")  # names in tasks/metrics
    # More metrics scored into the same table for side-by-side comparison (any name in tasks/metrics)
    baselines: tuple[str, ...] = ("bleu", "rouge_l", "bertscore_minilm")
    # The headline metrics: a column each, in this order, in the overview a reader sees first (the site's
    # index, `grebench report`, the `overview` view); a metric named here that the run did not score has none
    headline: tuple[str, ...] = ("gem", "gem_s_assw", "llm_judge")
    # Negative references per (candidate, reference) pair for the f-variational metrics (tasks/metrics/fmi.py):
    # references of other papers of the same venue, drawn with `negatives_seed`
    negatives: int = Field(4, ge=1, le=1000)
    negatives_seed: Seed = 0
    # Several evaluation LMs in one run (tasks/scoring/eval_lms.py): each a model name or a table with
    # the keys above (eval_lm, eval_lm_cuda, dtype, quantization); empty: the single eval_lm above
    eval_lms: tuple[EvalLMConfig, ...] = ()
    # The LLM oracle of the oracle cells (tasks/metrics/oracle_cells.py): "readout" reads the evaluation
    # LM's next-token probabilities; "generate" asks the [score.oracle] backend (temperature 0, cached)
    oracle_predictor: Literal["readout", "generate"] = "readout"
    # The generation backend of the "generate" oracle and of the LLM judges (same keys as any backend)
    oracle: LLMConfig = LLMConfig()
    # The sampled oracle cells (`<cell>_sampled`, tasks/metrics/oracle_cells.py): the [score.oracle] backend at
    # this temperature, asked `oracle_repeats` times per question, the answers averaged (each draw cached
    # under its own key); the Scoring Rules paper's variance reduction by repeated oracle calls. The Anthropic
    # API takes no temperature (API version 2026-10-21): its models draw at their own setting ("default")
    oracle_temperature: float = Field(1.0, gt=0, le=2)
    oracle_repeats: int = Field(1, ge=1, le=64)
    # A panel in the judging role (tasks/metrics/panel.py): the LLM judges and the "generate" oracle ask
    # every backend listed and average their values; empty: the [score.oracle] backend alone
    judges: tuple[LLMConfig, ...] = ()
    # Auto-PRE's fusion weights of that panel ("backend/model" -> weight): after the qualify stage each
    # member's weight is the mean of its exam scores (consistency, pertinence, self-confidence); a
    # member without one weighs 1 (empty: the plain mean); each weight finite, 0 to 1e6, their sum above 0
    judge_weights: dict[str, Annotated[float, Field(ge=0, le=1e6)]] = {}
    # How a judge's 0-10 rating is read (tasks/metrics/judge.py): "auto" reads it as the expectation over
    # the score tokens at the answer position (G-Eval) from every judge whose backend gives token
    # probabilities, and generates and parses "Score: N" for the others; "generate": always the latter
    judge_method: Literal["auto", "generate"] = "auto"
    # The judges' context in tokens for the paper text lm_examiner reads (cut at section boundaries)
    judge_context_tokens: int = Field(8192, ge=512, le=10_000_000)
    # The pairwise judge (tasks/metrics/pairwise.py): pairs of generated candidates judged per paper, each
    # in both orders with a revision of one review; 0: every pair, k: k pairs a paper, a different pair on
    # each paper (rotated by the paper's id), so that a few calls still cover every pair of models
    pairwise_pairs_per_paper: int = Field(0, ge=0, le=1000)
    # BARTScore (tasks/metrics/bartscore.py): any seq2seq model (a folder or a model id); unset, the
    # bartscore_* metrics cannot run and say so
    bartscore_model: str | None = None
    # A panel of logit-readout oracles (tasks/metrics/readout_panel.py): with oracle_predictor = "readout"
    # the oracle cells read each local LM listed (a model name or a table with the keys of eval_lms) and
    # average their values; "eval_lms": the evaluation LMs of eval_lms; empty: the first evaluation LM alone
    oracle_readouts: tuple[EvalLMConfig, ...] | Literal["eval_lms"] = ()
    # The evaluation LM behind an OpenAI-compatible completions server (vLLM, SGLang; docs/engines.md):
    # backend = "openai", api = "completions"; set, it replaces eval_lm / eval_lm_cuda
    eval_server: LLMConfig | None = None
    # RevisEval (tasks/metrics/reviseval.py): the LLM that revises each candidate; None: [score.oracle]
    reviser: LLMConfig | None = None
    # Beyond Rating's review-quality metrics and the rating outcomes (points_*, focus_kl_*, rating_mae, ...)
    review_quality: ReviewQualityConfig = ReviewQualityConfig()
    # Human references flagged as likely AI-written (Binoculars below a threshold)
    reference_flags: ReferenceFlagsConfig = ReferenceFlagsConfig()

    @field_validator("eval_lms", "oracle_readouts", mode="before")
    @classmethod
    def _eval_lm_names(cls, value: object) -> object:
        if isinstance(value, (list, tuple)):
            return tuple({"eval_lm": v} if isinstance(v, str) else v for v in value)
        return value

    @field_validator("eval_server")
    @classmethod
    def _a_completions_server(cls, value: LLMConfig | None) -> LLMConfig | None:
        if value is not None and (value.backend != "openai" or value.api != "completions"):
            raise ValueError('an evaluation LM server needs backend = "openai" and api = "completions"')
        return value

    @field_validator("judge_weights")
    @classmethod
    def _some_weight(cls, value: dict[str, float]) -> dict[str, float]:
        if value and not sum(value.values()) > 0:
            raise ValueError("every weight is 0: a panel mean needs one member that counts")
        return value

    @model_validator(mode="after")
    def _one_kind_of_evaluation_lm(self) -> ScoreConfig:
        if self.eval_server is not None and self.eval_lms:
            raise ValueError("eval_server and eval_lms cannot be combined: name one served evaluation LM, "
                             "or local ones in eval_lms")
        return self

    @property
    def all_metrics(self) -> tuple[str, ...]:
        """`metrics` then `baselines`, each once: everything the score stage scores."""
        return tuple(dict.fromkeys((*self.metrics, *self.baselines)))
