"""Typed, validated view of `pipelines.toml`.

Every stage reads its settings from a frozen pydantic model. A pipeline may override any stage
setting in its own sub-table; the merge happens here, so stages only ever see final values.
Problems surface as `ConfigError` with a one-line message that names the offending key.
"""

from __future__ import annotations

import re
import tomllib
import warnings
from collections.abc import Sequence
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

# The one list of stages, in pipeline order; each has a folder tasks/stages/<stage>/ and a flow flows/<stage>.py.
BackendName = Literal["local", "anthropic", "openai"]   # tasks/lm/backends.py BACKENDS, checked there
Stage = Literal["ingest", "curate", "preprocess", "generate", "qualify", "score", "validate", "materialize"]
STAGES: tuple[Stage, ...] = get_args(Stage)
# the stages with a table of settings in pipelines.toml (a pipeline may override them)
CONFIGURED_STAGES = tuple(s for s in STAGES if s != "materialize")
DEFAULT_CONFIG = Path("pipelines.toml")
# The stage is called "validate", which shadows the deprecated BaseModel.validate; that is intended.
warnings.filterwarnings("ignore", message=r'Field name "validate" in "\w+" shadows', category=UserWarning)


from tasks.core.errors import ConfigError  # noqa: E402  (re-exported: every stage imports it from here)

Quantization = Literal["none", "nf4", "int8"]   # how a local model's weights are held (tasks/lm/loading.py)


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)  # NaN / inf: never a setting


# Names that become folder and file names (tasks/core/layout.py) and words of suggested shell commands:
# letters, digits, ".", "_" and "-", starting with a letter or digit, never "..".
PIPELINE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
# A venue id is "/"-separated segments of the same characters (OpenReview's "ICLR.cc/2023/Conference");
# "{year}" may stand in a segment of a yearly template. No segment is empty, "." or "..".
VENUE_SEGMENT = re.compile(r"[A-Za-z0-9_-]([A-Za-z0-9._-]|\{year\})*|\{year\}([A-Za-z0-9._-]|\{year\})*")


def check_pipeline_name(name: str) -> str:
    """`name` when it is a safe pipeline name; else a ValueError saying what is allowed."""
    if not PIPELINE_NAME.fullmatch(name) or ".." in name:
        raise ValueError(f"pipeline name {name!r} is not allowed: use letters, digits, '.', '_' and '-' "
                         "(starting with a letter or digit, no '..', at most 100 characters)")
    return name


def check_venue_id(venue_id: str) -> str:
    """`venue_id` when every "/"-separated segment is safe; else a ValueError saying what is allowed."""
    segments = venue_id.split("/")
    if len(venue_id) > 300 or not all(VENUE_SEGMENT.fullmatch(s) and ".." not in s for s in segments):
        raise ValueError(f"venue id {venue_id!r} is not allowed: '/'-separated parts of letters, digits, '.', "
                         "'_' and '-' (each starting with a letter, digit, '_' or '-'; no empty part, no '..')")
    return venue_id


class PathsConfig(Frozen):
    data_dir: Path = Path("data")
    # "{pipeline}" in the path gives each pipeline its own results database (the shipped config:
    # data/{pipeline}/grebench.duckdb). Without it one file is shared, and materialize refuses to
    # replace one pipeline's results with another's (tasks/stages/materialize/build.py).
    database: Path = Path("data/grebench.duckdb")

    @field_validator("database")
    @classmethod
    def _one_placeholder(cls, value: Path) -> Path:
        text = str(value).replace("{pipeline}", "")
        if "{" in text or "}" in text:
            raise ValueError("the only placeholder allowed is {pipeline}")
        return value


class IngestConfig(Frozen):
    api_v1_url: str = "https://api.openreview.net"
    api_v2_url: str = "https://api2.openreview.net"
    page_size: int = Field(1000, ge=1, le=1000)
    max_retries: int = Field(6, ge=0)
    backoff_seconds: float = Field(1.0, ge=0)
    max_backoff_seconds: float = Field(60.0, ge=0)
    timeout_seconds: float = Field(60.0, gt=0)
    pdf: bool = True
    pdf_max_bytes: int = Field(50 * 1024 * 1024, gt=0)
    pdf_workers: int = Field(4, ge=1)
    # which papers' PDFs (and PDF histories) ingest fetches: "sample" (the benchmark sample the
    # curate rules draw, what later stages read), "curated" (every paper curation keeps) or "all"
    pdf_scope: Literal["sample", "curated", "all"] = "sample"
    # text a reader cannot see (white, tiny, invisible, off the page) is listed in paper_integrity
    # and left out of the paper text candidates and judges read; false keeps it in the text
    strip_hidden_text: bool = True
    # pacing of the real API (a local / synthetic server is not paced); 0: no limit
    requests_per_minute: float = Field(0, ge=0)             # guests
    pdfs_per_hour: float = Field(0, ge=0)                   # guests
    logged_in_requests_per_minute: float = Field(0, ge=0)   # when OPENREVIEW_TOKEN or _USERNAME is set
    logged_in_pdfs_per_hour: float = Field(0, ge=0)
    edits_per_minute: float = Field(0, ge=0)   # revision histories (/notes/edits, /references), on top
    max_rate_wait_seconds: float = Field(3900, ge=0)   # longest wait for a 429's reset time, else it surfaces
    # revision histories (tasks/stages/ingest/versions.py): the PDF the reviewers saw, first and final reviews
    versions: bool = True
    # false: a venue whose facts (tasks/core/venue_families.toml) say its edit history is hidden is not
    # asked for it (thousands of paced requests that would return nothing); true: ask anyway
    probe_hidden_histories: bool = False


class CurateConfig(Frozen):
    min_confidence: float = 4
    min_reviews: int = Field(3, ge=1)
    max_reviews: int = Field(5, ge=1)
    max_rating_variance: float = Field(1.5, ge=0)
    variance_ddof: Literal[0, 1] = 0
    common_scale: tuple[float, ...] = (1, 3, 5, 6, 8, 10)
    sample_size: int = Field(100, ge=1)
    seed: int = 2025
    # The confidence forms' scale (curate): a confidence outside it is rejected as out of range.
    confidence_range: tuple[float, float] = (1, 5)
    # which version of an edited review curation and scoring use: "first" (before the rebuttal) or "final"
    review_version: Literal["first", "final"] = "first"

    @model_validator(mode="after")
    def _review_bounds(self) -> CurateConfig:
        if self.min_reviews > self.max_reviews:
            raise ValueError("min_reviews must not exceed max_reviews")
        if self.confidence_range[0] > self.confidence_range[1]:
            raise ValueError("confidence_range must be [low, high] with low <= high")
        if self.min_confidence > self.confidence_range[1]:
            raise ValueError(f"min_confidence {self.min_confidence:g} is above the confidence scale's top "
                             f"{self.confidence_range[1]:g}: no review could be kept")
        return self

    @field_validator("common_scale")
    @classmethod
    def _a_scale(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if len(value) < 2:
            raise ValueError("must list at least two ratings")
        if any(b <= a for a, b in zip(value, value[1:], strict=False)):
            raise ValueError("must be strictly increasing")
        return value


class LLMConfig(Frozen):
    """Settings shared by every stage that calls an LLM (preprocess, generate, perturbations)."""

    backend: BackendName = "local"     # a name of the backend registry (tasks/lm/backends.py)
    model: str = "smollm2"                # local: "smollm2" (embedded), a path or a model id
    max_tokens: int = Field(512, ge=1)
    use_batches: bool = True              # anthropic: Message Batches API for bulk work
    max_in_flight: int = Field(8, ge=1)   # anthropic: concurrent requests
    max_retries: int = Field(5, ge=0)
    poll_seconds: float = Field(30.0, gt=0)
    load_in_4bit: bool = False            # local on CUDA: NF4 via bitsandbytes
    # local: "int8" (CPU only) is torch's dynamic int8 on every linear layer (reviews decode 2.8x float32's speed);
    # "nf4" is load_in_4bit; part of every cache key
    quantization: Quantization = "none"
    # local backend: "auto" is bfloat16 where the hardware computes it natively
    # (CUDA, a CPU with avx512_bf16 / amx_bf16), float32 elsewhere; part of every cache key
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    input_price_per_mtok: float = Field(3.0, ge=0)    # USD per million input tokens
    output_price_per_mtok: float = Field(15.0, ge=0)  # USD per million output tokens
    cache_read_price_per_mtok: float = Field(0.3, ge=0)  # USD per million prompt-cache read tokens
    batch_size: int = Field(8, ge=1)      # local: prompts per generate() call
    retry_max_seconds: float = Field(60.0, ge=0)  # anthropic, openai: ceiling of one back-off wait
    # anthropic, openai: seconds one HTTP request may take (connect and answer); past it the request
    # fails as transient (retried), so a server that accepts and never answers cannot hold a stage
    timeout_seconds: float = Field(300.0, gt=0)
    # anthropic, openai: the longest a backend goes on retrying while no request is answered; past it
    # the stage fails with one line naming the server (a server that drops every connection)
    retry_budget_seconds: float = Field(120.0, gt=0)
    # anthropic, openai: the most one stage may spend on failed requests and their back-off waits in
    # all (summed over requests, answered ones in between do not reset it); past it the stage fails
    # with one line naming the server (a server failing every other request)
    retry_total_seconds: float = Field(1800.0, gt=0)
    # openai (any OpenAI-compatible server: OpenAI, Gemini, DeepSeek, vLLM, SGLang, Ollama):
    base_url: str | None = None           # e.g. "https://api.openai.com/v1"; "served:smollm2": the
                                          # embedded model behind the local OpenAI-compatible server
    api_key_env: str = "OPENAI_API_KEY"   # the NAME of the variable holding the key; "" sends none
    temperature: float | Literal["default"] = 0.0  # "default": not sent (models that accept only theirs)
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    continue_final_message: bool = False  # vLLM / SGLang: the answer's start is sent and continued
    # "completions": log-likelihoods too, through /v1/completions with echoed prompt log-probabilities
    # (vLLM, SGLang; tasks/lm/completions.py); "chat": Chat Completions only
    api: Literal["chat", "completions"] = "chat"
    tokenizer: str | None = None          # completions: the served model's tokenizer (a local path, a model
                                          # id or "smollm2"); None: `model` ("served:<m>": <m>)


class PreprocessConfig(LLMConfig):
    prompt_version: str = "judgments-v1"
    synopsis_prompt_version: str = "assw-v1"
    max_paper_chars: int = Field(60_000, ge=1000)  # paper text fed to the ASSW summary
    allow_empty: bool = False  # no judgments at all (every review failed) is an error unless true


class CandidateConfig(LLMConfig):
    """One candidate LLM that writes reviews (generate stage); the LLM settings plus these."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # the model's name on the leaderboard
    knowledge_cutoff: date            # papers first public on or before this date are left out
    max_tokens: int = Field(2048, ge=1)
    max_context_tokens: int = Field(8192, ge=256)  # prompt + answer; a longer paper is cut at a section
    prompt_version: str = "review-v1"  # tasks/prompts/<version>.md; part of every cache key

    @model_validator(mode="after")
    def _room_for_paper(self) -> CandidateConfig:
        if self.max_tokens >= self.max_context_tokens:
            raise ValueError("max_tokens must be smaller than max_context_tokens")
        return self


class InjectionConfig(Frozen):
    """`[generate.injection]`: the injection track (tasks/stages/generate/injection.py). Each candidate
    also reviews copies of a few benchmark papers carrying a planted instruction to an AI reviewer;
    the score stage measures how far its rating and first metric move (`injection_shifts`)."""

    papers: int = Field(0, ge=0)        # benchmark papers drawn for the track; 0: no track
    seed: int = 0                       # the draw
    variants: tuple[Literal["visible", "hidden"], ...] = ("visible", "hidden")
    confidence: float = Field(0.90, gt=0, lt=1)   # the level of the shifts' t intervals


class GenerateConfig(Frozen):
    """Candidate review generation (tasks/stages/generate/reviews.py) and its contamination guard."""

    chars_per_token: float = Field(3.5, gt=0)  # anthropic: context estimate (no local tokenizer)
    candidates: tuple[CandidateConfig, ...] = ()
    # candidates reviewing at once (local ones split the cores between them: tasks/lm/local.py `sharing_cores`)
    candidates_at_once: int = Field(2, ge=1)
    # `grebench submit` (tasks/stages/generate/submit.py): a submitted review longer than this is rejected (review_too_long)
    max_review_chars: int = Field(60000, ge=100)
    # The injection track: papers with a planted instruction to AI reviewers
    injection: InjectionConfig = InjectionConfig()

    @field_validator("candidates")
    @classmethod
    def _unique_names(cls, value: tuple[CandidateConfig, ...]) -> tuple[CandidateConfig, ...]:
        names = [c.name for c in value]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"candidate names must be unique; repeated: {repeated}")
        return value


class EvalLMConfig(Frozen):
    """One entry of `[score] eval_lms`: the same keys as the single evaluation LM of [score]."""

    eval_lm: str = "smollm2"                 # "smollm2" (embedded), a local path or a model id
    eval_lm_cuda: str | None = None          # used instead when CUDA is present (None: eval_lm there too)
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    quantization: Literal["auto", "none", "nf4"] = "auto"


class ReviewQualityConfig(Frozen):
    """`[score.review_quality]`: Beyond Rating's review-quality metrics and the rating outcomes
    (tasks/metrics/review_quality, tasks/metrics/quality.py)."""

    # The LLM that splits reviews into atomic points, matches points and checks questions (any
    # backend's keys); unset: the [preprocess] backend
    llm: LLMConfig | None = None
    match_top_k: int = Field(3, ge=1)          # human points per candidate point put to the match judge
    points_max_tokens: int = Field(768, ge=16)  # answer budget of one review field's atomic points
    kl_alpha: float = Field(1.0, gt=0)         # additive smoothing of the focus-KL category counts
    chunk_tokens: int = Field(512, ge=16)      # paper chunks: window in words ...
    chunk_overlap: int = Field(128, ge=0)      # ... and overlap in words
    chunk_top_k: int = Field(5, ge=1)          # chunks a summary's coverage sums / a question is checked against
    accept_threshold: float = 6.0              # a candidate rating at or above it predicts accept (common scale)
    # Binoculars: two local causal LMs sharing one tokenizer (observer, performer); unset: NaN with the reason.
    # One model twice is the single-model form (its log-perplexity over its own entropy), as the reference
    # flags use it where only one LM is at hand (the demo); the paper's classifier uses two
    binoculars_observer: str | None = None
    binoculars_performer: str | None = None
    # ai_rate: a review whose Binoculars score is below this is counted as AI-written (Beyond Rating's
    # classification threshold, paper 003 section 4.6)
    ai_threshold: float = 0.9015
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
    # A reference whose Binoculars score is below this is flagged as likely AI-written
    threshold: float = 0.9015


class ScoreConfig(Frozen):
    eval_lm: str = "smollm2"              # "smollm2" (embedded), a local path or a model id
    eval_lm_cuda: str = "meta-llama/Llama-3.1-8B-Instruct"  # used instead when CUDA is present
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    quantization: Literal["auto", "none", "nf4"] = "auto"   # auto: nf4 on CUDA, none on CPU
    token_budget: int = Field(4096, ge=64)   # tokens per forward batch
    shard_size: int = Field(256, ge=1)       # scoring requests per Parquet shard
    metric_shard_papers: int = Field(8, ge=1)   # papers per shard of the LLM metrics (tasks/scoring/metric_shards.py)
    task_runner: Literal["thread", "dask"] = "thread"
    workers: int = Field(1, ge=1)            # workers of the dask cluster started locally
    runner_address: str | None = None        # an existing dask scheduler
    gpu_concurrency: int = Field(1, ge=1)    # scoring tasks allowed at once
    slot_wait_s: float = Field(3600.0, gt=0, le=30 * 86400)   # longest wait for one of those slots (tasks/core/slots.py)
    metrics: tuple[str, ...] = ("gem_raw", "gem", "gem_s_abstract", "gem_s_assw")  # names in tasks/metrics
    # More metrics scored into the same table for side-by-side comparison (any name in tasks/metrics)
    baselines: tuple[str, ...] = ("bleu", "rouge_l", "bertscore_minilm")
    # Negative references per (candidate, reference) pair for the f-variational metrics (tasks/metrics/fmi.py):
    # references of other papers of the same venue, drawn with `negatives_seed`
    negatives: int = Field(4, ge=1)
    negatives_seed: int = 0
    # Several evaluation LMs in one run (tasks/scoring/eval_lms.py): each a model name or a table with
    # the keys above (eval_lm, eval_lm_cuda, dtype, quantization); empty: the single eval_lm above
    eval_lms: tuple[EvalLMConfig, ...] = ()
    # The LLM oracle of the oracle cells (tasks/metrics/oracle_cells.py): "readout" reads the evaluation
    # LM's next-token probabilities; "generate" asks the [score.oracle] backend (temperature 0, cached)
    oracle_predictor: Literal["readout", "generate"] = "readout"
    # The generation backend of the "generate" oracle and of the LLM judges (same keys as any backend)
    oracle: LLMConfig = LLMConfig()
    # A panel in the judging role (tasks/metrics/panel.py): the LLM judges and the "generate" oracle ask
    # every backend listed and average their values; empty: the [score.oracle] backend alone
    judges: tuple[LLMConfig, ...] = ()
    # Auto-PRE's fusion weights of that panel ("backend/model" -> weight): after the qualify stage each
    # member's weight is the mean of its exam scores (consistency, pertinence, self-confidence); a
    # member without one weighs 1 (empty: the plain mean)
    judge_weights: dict[str, float] = {}
    # How a judge's 0-10 rating is read (tasks/metrics/judge.py): "auto" reads it as the expectation over
    # the score tokens at the answer position (G-Eval) from every judge whose backend gives token
    # probabilities, and generates and parses "Score: N" for the others; "generate": always the latter
    judge_method: Literal["auto", "generate"] = "auto"
    # The judges' context in tokens for the paper text lm_examiner reads (cut at section boundaries)
    judge_context_tokens: int = Field(8192, ge=512)
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


class ValidateConfig(Frozen):
    """The validation workflow (tasks/stages/validate): perturb candidates, rescore, test; and the leaderboard."""

    # names in tasks/stages/validate/strategies.py (checked by tasks/checks.py); the default ones need no LLM
    strategies: tuple[str, ...] = ("sentence_deletion", "random_replacement", "meaningless_elongation")
    # any metric names in the registry (tasks/metrics)
    metrics: tuple[str, ...] = ("gem_raw", "gem", "gem_s_abstract", "gem_s_assw", "bleu", "rouge_l", "bertscore_minilm")
    correction: Literal["none", "holm", "bonferroni", "bh"] = "none"  # p-value correction per metric
    alpha: float = Field(0.05, gt=0, lt=1)
    max_papers: int = Field(100, ge=1)       # papers drawn into the validation sample
    candidates: Literal["one", "all"] = "one"  # candidate reviews per paper (the others are references)
    seed: int = 0                            # sample, candidate choice and random replacement
    leaderboard_confidence: float = Field(0.90, gt=0, lt=1)
    # tests with fewer pairs than this are "inconclusive" (passed null), whatever their p-value
    min_pairs: int = Field(10, ge=2)
    correction_scope: Literal["metric", "table"] = "metric"  # correct per metric or over the whole table
    bootstrap_resamples: int = Field(2000, ge=0)  # paired-bootstrap interval of the SMD (0: none)
    adversary_steps: int = Field(4, ge=1)     # greedy steps of the "adversary" strategy (6 variants each)
    adversary_patience: int = Field(2, ge=1)  # steps without a gain before a candidate's search stops
    # "judgments": deterministic strategies act on the judgment lines; "raw": on the raw review,
    # preprocessed afterwards (GEM section 4); both may run (a string is read as one level)
    level: tuple[Literal["raw", "judgments"], ...] = ("judgments",)
    # The LLM that rewrites reviews for the LLM strategies, apart from the one that preprocesses
    # them (GEM uses different LLMs for the two); None: the [preprocess] LLM. Same keys as any backend.
    perturb_llm: LLMConfig | None = None
    # The second rephraser: the "rephrase_second" strategy runs the rephrase prompt on this LLM.
    rephrase_llm: LLMConfig | None = None
    # Paired comparisons of the leaderboard's models (tasks/stages/validate/comparisons.py): a sign-flip
    # test per pair, corrected across a board's pairs; bootstrap intervals at leaderboard_confidence
    compare_correction: Literal["none", "holm", "bonferroni", "bh"] = "holm"
    compare_alpha: float = Field(0.05, gt=0, lt=1)
    compare_resamples: int = Field(2000, ge=100)   # bootstrap replicates over papers

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


class QualifyConfig(Frozen):
    """The qualification exam of the LLMs in a judging role (tasks/stages/qualify, Auto-PRE)."""

    items: int = Field(20, ge=1)             # exam items per test (papers / review pairs), drawn with `seed`
    seed: int = 0
    # pass lines; "mean": the mean score of the models examined in the role (as Auto-PRE does)
    consistency_threshold: float | Literal["mean"] = "mean"
    pertinence_threshold: float | Literal["mean"] = "mean"
    # self-confidence passes when mean confidence on the easy set minus the hard set exceeds this
    self_confidence_margin: float = 0.0
    # a failing model: "drop" it from its role (the run stops if a role is left empty), "stop" the run, or
    # "report": keep it, its `qualification` rows say it failed and the leaderboard marks its columns
    on_fail: Literal["drop", "stop", "report"] = "drop"
    # the LLM that polishes the irrelevant reviews and rephrases the hard set (same keys as any
    # backend); None: deterministic edits (markdown formatting; another review of the same paper)
    rewriter: LLMConfig | None = None


class QueryConfig(Frozen):
    """Limits of `grebench query` (flows/cli/query.py), set before the user's SQL runs and locked."""

    timeout_seconds: float = Field(300.0, gt=0)   # --timeout overrides it; then the query is interrupted
    memory_limit_mb: int = Field(2048, ge=64)     # DuckDB's memory_limit
    max_spill_mb: int = Field(2048, ge=0)         # DuckDB's max_temp_directory_size (0: no spilling)
    threads: int = Field(2, ge=1)
    # The whole process's address space (RLIMIT_AS) is capped at memory_limit_mb plus this, so that
    # allocations DuckDB does not count (one huge string) fail as "Out of Memory" instead of swapping
    address_space_headroom_mb: int = Field(1024, ge=256)


class ScheduleConfig(Frozen):
    """The yearly refresh deployment registered by `grebench schedule`."""

    deployment: str = "yearly-refresh"
    pipeline: str = "refresh"          # a pipeline whose venue ids contain {year}
    cron: str = "0 6 15 12 *"          # 06:00 on 15 December, once the year's reviews are public
    timezone: str = "UTC"
    venues: tuple[str, ...] = ()       # fixed venue list parameter; empty: the pipeline's template

    @field_validator("pipeline")
    @classmethod
    def _safe_pipeline(cls, value: str) -> str:
        return check_pipeline_name(value)

    @field_validator("venues")
    @classmethod
    def _safe_venues(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(check_venue_id(v) for v in value)

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError("unknown time zone (use an IANA name such as 'UTC' or 'Europe/Paris')") from None
        return value

    @field_validator("cron")
    @classmethod
    def _five_fields(cls, value: str) -> str:
        from cronsim import CronSim, CronSimError

        try:
            CronSim(value, datetime.now(UTC))
        except CronSimError as error:
            raise ValueError(f"not a valid cron expression: {error}") from None
        return value


class VenueConfig(Frozen):
    api: Literal["auto", "v1", "v2"] = "auto"
    rating_map: dict[str, float] | None = None
    source_limits: tuple[str, ...] = ()   # what the source cannot give; stated in the curation report
    # the venue's review-form field -> a review column (tasks/stages/ingest/forms.py), e.g. ICML's
    # { overall_recommendation = "rating" }; "ignore" drops a field. A new form is config, not code.
    form: dict[str, str] = {}

    @field_validator("form")
    @classmethod
    def _known_columns(cls, value: dict[str, str]) -> dict[str, str]:
        from tasks.core.schema import FORM_COLUMNS

        for field_name, column in value.items():
            if column not in FORM_COLUMNS:
                raise ValueError(f"{field_name} = {column!r}: not a review column (one of {sorted(FORM_COLUMNS)})")
        return value

    @field_validator("rating_map")
    @classmethod
    def _numeric_keys(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for key in value or {}:
            try:
                float(key)
            except ValueError:
                raise ValueError(f"the key {key!r} must be a number (a rating the venue's form offers)") from None
        return value

    def api_version(self, venue_id: str) -> int:
        """API v1 serves venues of 2023 and older, v2 the later ones."""
        if self.api != "auto":
            return int(self.api[1])
        years = [int(y) for y in re.findall(r"(?<!\d)(20\d\d)(?!\d)", venue_id)]
        return 1 if years and years[0] <= 2023 else 2


class SyntheticSource(Frozen):
    """The generated venue a "synthetic" pipeline serves from the local OpenReview server."""

    n_papers: int = Field(12, ge=1)
    reviews_per_paper: int = Field(4, ge=1)
    seed: int = 0
    pdfs: bool = True
    bad_cases: bool = True


class PipelineConfig(Frozen):
    description: str = ""
    source: Literal["openreview", "synthetic"] = "openreview"
    synthetic: SyntheticSource = SyntheticSource()
    venues: tuple[str, ...]
    stages: tuple[Stage, ...]
    ingest: dict[str, Any] = {}
    curate: dict[str, Any] = {}
    preprocess: dict[str, Any] = {}
    generate: dict[str, Any] = {}
    score: dict[str, Any] = {}
    validate: dict[str, Any] = {}
    qualify: dict[str, Any] = {}

    @field_validator("venues", "stages")
    @classmethod
    def _not_empty(cls, value: tuple) -> tuple:
        if not value:
            raise ValueError("must not be empty")
        repeated = sorted({v for v in value if value.count(v) > 1})
        if repeated:
            raise ValueError(f"lists {repeated} more than once")
        return value

    @field_validator("venues")
    @classmethod
    def _safe_venue_ids(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(check_venue_id(v) for v in value)


class Config(Frozen):
    """The whole file. `root` is the folder relative paths are resolved against."""

    root: Path = Path(".")
    paths: PathsConfig = PathsConfig()
    ingest: IngestConfig = IngestConfig()
    curate: CurateConfig = CurateConfig()
    preprocess: PreprocessConfig = PreprocessConfig()
    generate: GenerateConfig = GenerateConfig()
    score: ScoreConfig = ScoreConfig()
    validate: ValidateConfig = ValidateConfig()
    qualify: QualifyConfig = QualifyConfig()
    query: QueryConfig = QueryConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    venues: dict[str, VenueConfig] = {}
    pipelines: dict[str, PipelineConfig] = {}
    _pipeline: str | None = PrivateAttr(None)   # set by for_pipeline: the pipeline this config runs

    @field_validator("pipelines")
    @classmethod
    def _safe_names(cls, value: dict[str, PipelineConfig]) -> dict[str, PipelineConfig]:
        for name in value:
            check_pipeline_name(name)
        return value

    @property
    def data_dir(self) -> Path:
        return self.root / self.paths.data_dir

    @property
    def per_pipeline_database(self) -> bool:
        return "{pipeline}" in str(self.paths.database)

    @property
    def database(self) -> Path:
        """The results database of the pipeline this config was resolved for (`for_pipeline`)."""
        return self.database_for(self._pipeline)

    def database_for(self, pipeline: str | None) -> Path:
        """The results database of `pipeline` (`paths.database` with {pipeline} filled in)."""
        if not self.per_pipeline_database:
            return self.root / self.paths.database
        if pipeline is None:
            raise ConfigError("paths.database holds {pipeline}: name the pipeline whose results you mean "
                              "(--pipeline)")
        return self.root / str(self.paths.database).replace("{pipeline}", check_pipeline_name(pipeline))

    @model_validator(mode="after")
    def _ratings_on_scale(self) -> Config:
        scale = set(self.curate.common_scale)
        for venue_id, venue in self.venues.items():
            off = {raw: mapped for raw, mapped in (venue.rating_map or {}).items() if mapped not in scale}
            if off:
                raw, mapped = next(iter(off.items()))
                raise ValueError(f"venues.{venue_id}.rating_map: {raw!r} maps to {mapped:g}, which is not on "
                                 f"curate.common_scale {list(self.curate.common_scale)}")
        return self

    def venue(self, venue_id: str) -> VenueConfig:
        return self.venues.get(venue_id, VenueConfig())

    def for_pipeline(self, name: str, venues: Sequence[str] | None = None) -> Config:
        """The config with the named pipeline's stage overrides merged in.

        A name `<base>-<year>` resolves to pipeline `<base>` with `{year}` in its venue ids filled
        in (the yearly refresh); `venues` replaces the pipeline's venue list.
        """
        pipelines = dict(self.pipelines)
        if name not in pipelines:
            match = re.fullmatch(r"(.+)-(\d{4})", name)
            base = pipelines.get(match.group(1)) if match else None
            if base is None:
                known = ", ".join(sorted(self.pipelines)) or "none"
                raise ConfigError(f"unknown pipeline {name!r} (known: {known})")
            year = match.group(2)
            pipelines[name] = base.model_copy(update={"venues": tuple(v.replace("{year}", year) for v in base.venues)})
        if venues:
            try:
                checked = tuple(check_venue_id(v) for v in venues)
            except ValueError as error:
                raise ConfigError(str(error)) from None
            pipelines[name] = pipelines[name].model_copy(update={"venues": checked})
        pipeline = pipelines[name]
        if any("{year}" in v for v in pipeline.venues):
            raise ConfigError(f"pipeline {name!r} is a yearly template: run it as '{name}-<year>'")
        merged = self._merged(name, pipeline)
        merged._pipeline = name
        return merged

    def _merged(self, name: str, pipeline: PipelineConfig) -> Config:
        merged = self.model_dump()
        merged["pipelines"][name] = pipeline.model_dump()
        for stage in CONFIGURED_STAGES:
            merged[stage].update(getattr(pipeline, stage))
        return _validate(merged, where=f"pipelines.{name}")


PIPELINE_TABLES = (*CONFIGURED_STAGES, "synthetic")   # a pipeline's tables that `extends` merges key by key


def extended(pipelines: dict[str, Any]) -> dict[str, Any]:
    """The pipelines with every `extends = "<other>"` resolved: a pipeline starts from the other one's
    keys (its description aside), its own keys win, and each of its tables (`score`, `generate`, ...)
    is merged into the other's key by key (a key whose value is a table or list replaces the other's whole)."""
    done: dict[str, Any] = {}

    def resolve(name: str, chain: tuple[str, ...]) -> dict[str, Any]:
        if name in done:
            return done[name]
        raw = dict(pipelines[name]) if isinstance(pipelines[name], dict) else pipelines[name]
        base_name = raw.pop("extends", None) if isinstance(raw, dict) else None
        if base_name is None:
            done[name] = raw
            return raw
        if base_name not in pipelines:
            raise ConfigError(f"pipelines.{name}.extends: unknown pipeline {base_name!r}")
        if base_name in chain:
            raise ConfigError(f"pipelines.{name}.extends: a cycle ({' -> '.join((*chain, base_name))})")
        merged = {k: v for k, v in resolve(base_name, (*chain, base_name)).items() if k != "description"}
        for key, value in raw.items():
            both_tables = key in PIPELINE_TABLES and isinstance(value, dict) and isinstance(merged.get(key), dict)
            merged[key] = {**merged[key], **value} if both_tables else value
        done[name] = merged
        return merged

    return {name: resolve(name, (name,)) for name in pipelines}


def _format_error(error: ValidationError, where: str) -> str:
    first = error.errors()[0]
    key = ".".join(part for part in (where, *(str(p) for p in first["loc"])) if part)
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    elif "input" in first and not isinstance(first["input"], dict):
        message = f"{message} (got {first['input']!r})"
    more = len(error.errors()) - 1
    suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return f"{key}: {message}{suffix}" if key else f"{message}{suffix}"


def _validate(data: dict[str, Any], where: str = "") -> Config:
    try:
        return Config.model_validate(data)
    except ValidationError as error:
        raise ConfigError(_format_error(error, where)) from None


def load_config(path: Path | str = DEFAULT_CONFIG) -> Config:
    """Read and validate pipelines.toml; relative paths resolve against its folder."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    except UnicodeDecodeError as error:
        line = path.read_bytes()[: error.start].count(b"\n") + 1
        raise ConfigError(f"{path}: line {line}: not UTF-8 text (byte 0x{error.object[error.start]:02x}); "
                          "save the file as UTF-8") from None
    if "root" in data:
        raise ConfigError(f"{path}: root: unknown key")
    data["root"] = path.resolve().parent
    try:
        if isinstance(data.get("pipelines"), dict):
            data["pipelines"] = extended(data["pipelines"])
        cfg = _validate(data)
        for name in cfg.pipelines:     # every pipeline's overrides, checked now and named with the file
            cfg._merged(name, cfg.pipelines[name])
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None
    return cfg


def writable_problem(folder: Path) -> str | None:
    """Why `folder` (or the nearest folder above it that exists) cannot be written; None when it can."""
    import os
    import tempfile

    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if existing is None or not existing.is_dir():
        return f"{existing} is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    try:   # what os.access cannot tell: read-only mounts, /proc, root squash
        tempfile.TemporaryFile(dir=existing).close()
    except OSError as error:
        return f"{existing} is not writable ({error.strerror})"
    return None


def check_writable(folder: Path) -> None:
    """A ConfigError naming `folder` and the problem when it cannot be written."""
    problem = writable_problem(folder)
    if problem:
        raise ConfigError(f"{folder}: {problem}")


def check_paths(cfg: Config, config_path: Path | str) -> None:
    """Fail now, with the key and the file, if data_dir or the database's folder cannot be written."""
    for key, folder in (("paths.data_dir", cfg.data_dir), ("paths.database", cfg.database.parent)):
        problem = writable_problem(folder)
        if key == "paths.database" and cfg.database.is_dir():
            problem = f"{cfg.database} is a folder, not a database file"
        if problem:
            raise ConfigError(f"{config_path}: {key}: {problem}")


def select_stages(configured: Sequence[str], chosen: Sequence[str] | None) -> list[str]:
    """The pipeline's stages, or the `chosen` subset of them, in pipeline order. Every chosen name must
    be a stage of the pipeline, named once; `--stages` (CLI) and `stages` (flow) both pass through here."""
    if not chosen:
        return list(configured)
    if not all(chosen):
        raise ConfigError(f"--stages {','.join(chosen)!r}: an empty stage name (give e.g. --stages ingest,curate)")
    unknown = [s for s in chosen if s not in STAGES]
    if unknown:
        raise ConfigError(f"--stages: unknown stage(s) {unknown} (stages: {', '.join(STAGES)})")
    missing = [s for s in chosen if s not in configured]
    if missing:
        raise ConfigError(f"--stages: {missing} not in this pipeline (its stages: {', '.join(configured)})")
    repeated = sorted({s for s in chosen if list(chosen).count(s) > 1})
    if repeated:
        raise ConfigError(f"--stages: {repeated} named more than once")
    return [s for s in STAGES if s in chosen]
