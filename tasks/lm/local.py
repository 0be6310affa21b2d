"""The local backend: a transformers causal LM that generates (greedy, or sampled at `temperature` > 0 with
a seed per request and draw) and gives log-likelihoods.

`generate`: prompts go through the model's chat template and are generated in batches, longest first so an
out-of-memory error shows up on the first batch (prompts that share a long prefix kept together, so
the decoder computes it once), with left padding so every row's answer starts
at the same column; results are put back in input order. A prompt that does not fit the model's
context is an error result, never silently cut. `load_in_4bit` asks for NF4 weights through
bitsandbytes, which needs CUDA; on a CPU-only machine it is refused with a clear error.

A request with `line_prefixes` is decoded under `LinePrefixConstraint`: every line of the answer
opens with one of the prefixes, carries at least `MIN_CONTENT_TOKENS` tokens after it and (with
`ONE_SENTENCE`) ends at its first sentence end, so one judgment is one line. Requests
are batched only with others that share the same prefixes.

Threads: each generate() call and each log-likelihood call runs on `generation_threads()`: the
cores this process may run on (its CPU affinity), or `GREBENCH_LOCAL_THREADS` when set, split evenly
between the local-model jobs of a `sharing_cores` section (the generate stage's candidates that
decode beside each other, GEM's shards beside the metric shards). No load-average guess: the
1-minute load average counts this process's own previous stage and so dropped generation to one
thread right after scoring. The calling thread's setting is restored afterwards.

`loglikelihood` runs the prefix-sharing engine of tasks/lm/loglikelihood.py (built on first use,
batches under `token_budget` padded tokens). `embed` is not offered: sentence vectors come from
the encoder (`tasks.lm.embedder()`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Literal, TypeVar

from tasks.core.allocator import give_back_freed_memory
from tasks.core.progress import track
from tasks.lm.batching import batches
from tasks.lm.cpu import release_freed
from tasks.lm.fitting import request_window
from tasks.lm.line_prefixes import LinePrefixConstraint
from tasks.lm.loading import ModelSpec, Tokens, chat_ids, chat_spec, load_model, tokenizer_for
from tasks.lm.loops import LOOP_RULE, loop_criterion, loop_end
from tasks.lm.types import (
    Accept,
    Backend,
    ChatRequest,
    ChatResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    OnAnswers,
)

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from tasks.core.config import LLMConfig
    from tasks.lm.decode import GreedyDecoder
    from tasks.lm.loglikelihood import LoglikelihoodEngine

log = logging.getLogger(__name__)
MIN_CONTENT_TOKENS = 3   # non-blank tokens each constrained line must carry after its prefix
ONE_SENTENCE = True      # a constrained line ends at its first sentence end
DECODING = f"greedy|min-content-{MIN_CONTENT_TOKENS}|one-sentence-{ONE_SENTENCE}"   # part of the cache identity
Decoder = Literal["fast", "stepwise", "generate"]
DRAFT_TOKENS = 8         # the fast decoder's most drafted tokens per row and step (tasks/lm/decode.py)
_CONSTRAINTS: dict[tuple[int, tuple[str, ...]], LinePrefixConstraint] = {}


class LocalLM(Backend):
    """A local causal LM (`spec`): generate and loglikelihood; `batch_size` prompts per generate()
    call, `token_budget` padded tokens per log-likelihood forward batch. `decoder`: "fast" (the
    loop of tasks/lm/decode.py, with drafts copied from the context), "stepwise" (the same loop,
    one token per step) or "generate" (transformers' `generate`, the reference both must match).
    `batch_invariant`: one prompt a call and no prompt head kept between calls (`LLMConfig.batch_invariant`).
    `stop_loops`: an answer that ends in a loop stops there, cut off and marked (tasks/lm/loops.py)."""

    name = "local"
    cannot = {
        "embed": ("{model} is a causal LM; embeddings come from the sentence encoder (tasks.lm.embedder())"),
        "top_logprobs": ("{model} is local: its full next-token distribution is read through loglikelihood "
                         "(tasks/lm/readout.py), no top-k cut needed"),
    }

    def __init__(self, spec: ModelSpec, batch_size: int = 8, token_budget: int = 4096,
                 decoder: Decoder = "fast", batch_invariant: bool = False, temperature: float = 0.0,
                 stop_loops: bool = True) -> None:
        if decoder not in ("fast", "stepwise", "generate"):
            raise ValueError(f"decoder must be 'fast', 'stepwise' or 'generate', not {decoder!r}")
        if temperature < 0:
            raise ValueError(f"temperature must be 0 (greedy) or above, not {temperature}")
        self.spec = spec
        self.decoder = decoder
        self.batch_invariant = batch_invariant
        self.batch_size = 1 if batch_invariant else batch_size
        self.token_budget = token_budget
        self.model = spec.name
        # temperature 0: greedy; above 0: each token drawn at that temperature, seeded by the request (`seed`)
        self.temperature = float(temperature)
        decoding = DECODING if not self.temperature else DECODING.replace("greedy", f"sample-t{self.temperature:g}")
        self.stop_loops = stop_loops
        if stop_loops:   # answers that loop are cut where they begin to: another answer, another key
            decoding += f"|{LOOP_RULE}"
        self.identity = f"local|{spec.resolved().key}|{decoding}"
        self.generated_tokens = 0
        self.generate_seconds = 0.0
        self._engines = threading.local()   # one engine per thread: its prefix caches and counters are its own
        self._greedy: GreedyDecoder | None = None

    @classmethod
    def from_config(cls, cfg: LLMConfig, base_url: str | None = None, batch_store: object = None) -> LocalLM:
        """The local chat model of `cfg` (`chat_spec`), `cfg.batch_size` prompts per generate() call and
        `cfg.token_budget` padded tokens per log-likelihood batch (tasks/lm/backends.py builds every backend
        so; a local model has no URL and no batches to keep)."""
        temperature = cfg.temperature if isinstance(cfg.temperature, (int, float)) else 0.0
        return cls(chat_spec(cfg), batch_size=cfg.batch_size, token_budget=cfg.token_budget,
                   batch_invariant=cfg.batch_invariant, temperature=temperature, stop_loops=cfg.stop_loops)

    def _loaded(self) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        return load_model(self.spec)

    def prompt_ids(self, request: ChatRequest) -> Tokens:
        """Token ids of the chat-formatted prompt, ending where the assistant's answer begins."""
        return chat_ids(self.tokenizer, request.system, request.user, request.prefill)

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return tokenizer_for(self.spec)

    @property
    def engine(self) -> LoglikelihoodEngine:
        """The log-likelihood engine on this model for the calling thread (built once per thread, keeping
        its prefix caches; the weights are shared): two scoring tasks of one process, side by side,
        never touch each other's caches."""
        engine = getattr(self._engines, "engine", None)
        if engine is None:
            from tasks.lm.loglikelihood import LoglikelihoodEngine

            # an int8 model decodes; its log-likelihoods come from the same weights in float
            # (int8 quantizes each batch's activations with one scale, so a value would depend on
            # the other requests of its batch: tasks/lm/loading.py `quantize_int8`)
            spec = replace(self.spec, quantization="none") if self.spec.quantization == "int8" else self.spec
            model, tokenizer = load_model(spec)
            engine = self._engines.engine = LoglikelihoodEngine(model, tokenizer, token_budget=self.token_budget)
        return engine

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        with torch_threads(generation_threads()):
            return self.engine.score(requests)

    def generate(self, requests: Sequence[ChatRequest], accept: Accept | None = None,
                 on_answers: OnAnswers | None = None) -> list[ChatResult]:
        """Greedy answers in request order, each batch's handed to `on_answers` when it is done (`accept`
        is for a caching wrapper; nothing is cached here)."""
        if not requests:
            return []
        model, _ = self._loaded()
        # the model's context, at most MAX_REQUEST_TOKENS: one request's memory is bounded (tasks/lm/fitting.py)
        context = request_window(int(getattr(model.config, "max_position_embeddings", 0) or 0))
        prompts = [self.prompt_ids(request) for request in requests]
        results: list[ChatResult | None] = [None] * len(requests)
        runnable = []
        for i, (request, ids) in enumerate(zip(requests, prompts, strict=True)):
            if context and len(ids) + request.max_tokens > context:
                results[i] = ChatResult(
                    "", input_tokens=len(ids), model=self.model,
                    error=f"prompt of {len(ids)} tokens + max_tokens {request.max_tokens} exceeds the "
                          f"model context of {context}",
                )
            elif request.line_prefixes and not self.constraint(request.line_prefixes).can_start(request.prefill):
                results[i] = ChatResult("", input_tokens=len(ids), model=self.model,
                                        error=f"prefill {request.prefill!r} does not open a line with any of "
                                              f"the line prefixes {request.line_prefixes!r}")
            else:
                runnable.append(i)
        # one group per set of line prefixes; within each, prompts that share a long prefix (a judge's
        # prompts quoting one paper: `prompt_clusters`) next to each other, so they share a batch and
        # the decoder computes that prefix once; longest prompt first otherwise (an out-of-memory error
        # shows up on the first batch)
        from tasks.lm.loglikelihood import prompt_clusters

        cluster_of: dict[Tokens, tuple[int, int]] = {}
        for rules in {_rules(requests[i]) for i in runnable}:
            own = [prompts[i] for i in runnable if _rules(requests[i]) == rules]
            for n, cluster in enumerate(prompt_clusters(own) if len(own) > 1 else [own]):
                cluster_of.update({ids: (-max(map(len, cluster)), n) for ids in cluster})
        chunks = [[runnable[k] for k in batch] for batch in batches(
            runnable, lambda i: len(prompts[i]),
            key=lambda i: (_rules(requests[i]), *cluster_of[prompts[i]], -len(prompts[i])),
            max_items=self.batch_size, group=lambda i: _rules(requests[i]))]
        for chunk in track(chunks, f"generating ({self.model})", "batch"):
            first = requests[chunk[0]]
            constraint = self.constraint(first.line_prefixes, first.one_line) if first.line_prefixes else None
            answers = self._generate([prompts[i] for i in chunk], [requests[i].max_tokens for i in chunk],
                                     constraint, [requests[i].prefill for i in chunk],
                                     [seed(self.identity, requests[i]) for i in chunk] if self.temperature else None)
            done = [(i, replace(result, text=requests[i].prefill + result.text))
                    for i, result in zip(chunk, answers, strict=True)]
            for i, result in done:
                results[i] = result
            if on_answers is not None:
                on_answers(done)
            if self._loaded()[0].device.type == "cpu":
                release_freed()
        return [result for result in results if result is not None]

    def constraint(self, prefixes: tuple[str, ...], one_line: bool = False) -> LinePrefixConstraint:
        """The line-prefix rules for this model's tokenizer (built once per process, prefixes and `one_line`)."""
        model, tokenizer = self._loaded()
        key = (id(tokenizer), prefixes, one_line)
        if key not in _CONSTRAINTS:
            _CONSTRAINTS[key] = LinePrefixConstraint(tokenizer, prefixes, sorted(self._stops()), MIN_CONTENT_TOKENS,
                                                      ONE_SENTENCE, one_line=one_line)
        return _CONSTRAINTS[key]

    def _stops(self) -> set[int]:
        model, tokenizer = self._loaded()
        found = {tokenizer.eos_token_id, tokenizer.pad_token_id}
        found |= set(_ids(getattr(model.generation_config, "eos_token_id", None)))
        return {token for token in found if token is not None}

    def _generate(self, prompts: list[Tokens], limits: list[int], constraint: LinePrefixConstraint | None = None,
                  prefills: list[str] | None = None, seeds: list[int] | None = None) -> list[ChatResult]:
        """Greedy answers for one batch (sampled ones with `seeds`, one per prompt, at the model's
        temperature). Decoding each row on its own (greedy, or its own generator) makes generating up
        to the largest limit and cutting each row at its own limit equal generating each alone (the
        line-prefix constraint is per row, so it keeps that true)."""
        model, tokenizer = self._loaded()
        started = time.perf_counter()
        if self.decoder != "generate":
            from tasks.lm.decode import GreedyDecoder, Sampling

            if self._greedy is None:
                # batch-invariant: no prompt head kept between calls, so each prompt is computed the same
                # way whatever was decoded before it in this process
                self._greedy = GreedyDecoder(model, heads_kept=0 if self.batch_invariant else 4,
                                             draft_tokens=DRAFT_TOKENS if self.decoder == "fast" else 0)
            sampling = Sampling(self.temperature, tuple(seeds)) if seeds is not None else None
            with torch_threads(generation_threads()):
                rows = self._greedy.generate(prompts, limits, self._stops(), constraint, prefills,
                                             step_threads=decode_threads(), sampling=sampling,
                                             stop_loops=self.stop_loops)
        elif seeds is not None:
            rows = [self._hf_generate([ids], [limit], constraint, [prefill], seed)[0]
                    for ids, limit, prefill, seed in zip(prompts, limits, prefills or [""] * len(prompts), seeds,
                                                         strict=True)]
        else:
            rows = self._hf_generate(prompts, limits, constraint, prefills)
        self.generate_seconds += time.perf_counter() - started
        stops = self._stops()
        results = []
        for row, ids, limit in zip(rows, prompts, limits, strict=True):
            row = row[:limit]
            end = next((k for k, token in enumerate(row) if token in stops), None)
            answer = row if end is None else row[:end]
            # every decoder cuts a looping answer at the token where it first loops (a drafted step may
            # have taken a few past it; transformers' rows go on to their stop criterion's end)
            looped = loop_end(answer) if self.stop_loops else None
            if looped is not None:
                answer = answer[:looped]
            self.generated_tokens += len(answer)
            results.append(
                ChatResult(
                    tokenizer.decode(answer, skip_special_tokens=True),
                    input_tokens=len(ids),
                    output_tokens=len(answer),
                    model=self.model,
                    truncated=end is None or looped is not None,
                    looped=looped is not None,
                )
            )
        return results

    def _hf_generate(self, prompts: list[Tokens], limits: list[int], constraint: LinePrefixConstraint | None,
                     prefills: list[str] | None, seed: int | None = None) -> list[list[int]]:
        """Answer tokens of one left-padded batch through transformers' `generate` (sampled at the model's
        temperature after seeding torch with `seed`, for a batch of one)."""
        import torch
        from transformers import LogitsProcessorList, StoppingCriteriaList

        model, tokenizer = self._loaded()
        width = max(len(ids) for ids in prompts)
        pad = tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(ids)) + list(ids) for ids in prompts])
        mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in prompts])
        device = next(model.parameters()).device
        processors = LogitsProcessorList()
        criteria = StoppingCriteriaList([loop_criterion(len(prompts), width)] if self.stop_loops else [])
        if constraint is not None:
            processors.append(constraint.processor(prefills or [""] * len(prompts), width))
        sampled = {"do_sample": True, "temperature": self.temperature, "top_k": 0, "top_p": 1.0} \
            if seed is not None else {"do_sample": False}
        with torch_threads(generation_threads()), torch.inference_mode():
            if seed is not None:
                torch.manual_seed(seed)
            output = model.generate(
                input_ids=input_ids.to(device),
                attention_mask=mask.to(device),
                max_new_tokens=max(limits),
                pad_token_id=pad,
                logits_processor=processors,
                stopping_criteria=criteria,
                **sampled,
            )
        return output[:, width:].tolist()

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / self.generate_seconds if self.generate_seconds else 0.0


def _rules(request: ChatRequest) -> tuple[tuple[str, ...], bool]:
    """What decides a request's constraint: its line prefixes and whether the answer is one line."""
    return request.line_prefixes, request.one_line


def seed(identity: str, request: ChatRequest) -> int:
    """The seed of one sampled answer: a hash of the model's identity, the prompt and the draw index, so
    the same request draws the same answer in any batch and each draw (`ChatRequest.sample`) its own."""
    blob = json.dumps([identity, request.system, request.user, request.prefill, request.sample], ensure_ascii=False)
    return int.from_bytes(hashlib.sha256(blob.encode()).digest()[:8], "little") & (2**63 - 1)


def generation_threads() -> int:
    """Threads for one local-model call: GREBENCH_LOCAL_THREADS if set, else the cores available
    to this process; either split between the jobs of a `sharing_cores` section (at least one each)."""
    fixed = os.environ.get("GREBENCH_LOCAL_THREADS", "").strip()
    cores = max(1, int(fixed)) if fixed else available_cores()
    return max(1, cores // _WAYS)


_WAYS = 1      # local-model jobs the cores are split between now (`sharing_cores`)


@contextlib.contextmanager
def sharing_cores(ways: int) -> Iterator[None]:
    """A section of the calling thread in which `ways` local-model jobs run side by side (candidates
    generating at once, GEM's shards beside the metric shards): every local generate() and
    log-likelihood call inside it, in any thread (an in-process server's too), takes 1/`ways` of the
    cores. The split is fixed by the configured concurrency, not by how many jobs happen to run at a
    given moment, so a run's answers never depend on timing: greedy answers of a small model can
    change with the thread count (a float sum split differently). A decoding step is small and gains
    little from a second thread (8 rows: 32 ms on one, 26 ms on two), so two jobs on one core each
    do more than one job on two. Torch's setting of the calling thread is set back on exit."""
    import torch

    global _WAYS
    before_ways, before_threads = _WAYS, torch.get_num_threads()
    _WAYS = max(1, ways)
    try:
        yield
    finally:
        _WAYS = before_ways
        torch.set_num_threads(before_threads)   # also torch's process-wide count, which a worker thread moved


Job = TypeVar("Job")
Model = TypeVar("Model")
Out = TypeVar("Out")


def lane_parts(n: int, lanes: int, batch_size: int) -> list[range]:
    """`n` rows cut into consecutive parts for `in_lanes`: a part is at most one batch of the model
    (`batch_size` prompts, so each is one generate() call) and at most 1/`lanes` of the rows, so that
    few rows still give every lane a part (10 rows, two lanes: two parts of 5, not one of 8 and one of 2)."""
    size = max(1, min(batch_size, -(-n // max(1, lanes))))
    return [range(k, min(k + size, n)) for k in range(0, n, size)]


def in_lanes(jobs: Sequence[Job], models: Sequence[Model], run: Callable[[Job, Model], Out],
             name: str = "lane") -> list[Out]:
    """`run(job, model)` for every job, in one lane per model side by side on an equal share of the cores
    (`sharing_cores`), results in the jobs' order. A lane takes the next job as soon as it is free, so
    the lanes end together instead of one waiting on the other's longest job.

    Which lane runs a job depends on timing, so the lanes must answer alike: the models are instances
    of one model on the same weights, every lane has the same share of the cores, and a job is a call
    of its own (its answers never depend on batchmates from another job). Give the longest jobs first.
    With one model or one job the jobs run in order on the calling thread."""
    if len(models) < 2 or len(jobs) < 2:
        return [run(job, models[0]) for job in jobs]
    todo: queue.SimpleQueue[int] = queue.SimpleQueue()
    for k in range(len(jobs)):
        todo.put(k)
    found: dict[int, Out] = {}

    def lane(model: Model) -> None:
        while True:
            try:
                k = todo.get_nowait()
            except queue.Empty:
                return
            try:
                found[k] = run(jobs[k], model)
            except BaseException:
                while not todo.empty():     # the other lanes stop after their current job
                    todo.get_nowait()
                raise

    try:
        with sharing_cores(len(models)), ThreadPoolExecutor(len(models), thread_name_prefix=name) as pool:
            for future in [pool.submit(lane, model) for model in models]:
                future.result()
    finally:
        give_back_freed_memory()   # what the lanes freed side by side is not kept under the next step's peak
    return [found[k] for k in range(len(jobs))]


def decode_threads() -> int | None:
    """Threads for the fast decoder's token-by-token steps: GREBENCH_DECODE_THREADS if set, else
    None (the same as the prompts). Steps are small, memory-bound ops that barely gain from a
    second thread, yet wait on it at every op when another process holds the core: on a shared
    2-core machine one thread made a decoding step 5 to 40x faster (README, measured figures)."""
    fixed = os.environ.get("GREBENCH_DECODE_THREADS", "").strip()
    return max(1, int(fixed)) if fixed else None


def available_cores() -> int:
    """Cores this process may run on: its CPU affinity where the OS has one, else all cores."""
    counted = getattr(os, "process_cpu_count", None)     # Python 3.13+
    if counted is not None:
        return max(1, counted() or 1)
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def torch_threads(count: int) -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    if count != before:
        log.info("local generation on %d torch threads (default %d)", count, before)
    # always set, also when this thread's count is already `count`: torch keeps a process-wide count
    # too (its thread pool, new threads' start) that another thread may have left elsewhere
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _ids(value: int | list[int] | None) -> list[int]:
    if value is None:
        return []
    return [value] if isinstance(value, int) else list(value)
