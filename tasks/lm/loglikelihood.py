"""Log-likelihoods under a causal LM, batched and prefix-shared: `LocalLM.loglikelihood` runs here.

`LoglikelihoodEngine.score(requests)` takes a sequence of frozen `LoglikelihoodRequest`s and returns
one `LoglikelihoodResult` per request, in the same order.

Tokenization convention (fixed; every metric depends on it):

* the prompt is the tokenizer's chat template applied to [system, user] with the generation prompt
  appended (`add_generation_prompt=True`), rendered to text and tokenized with
  `add_special_tokens=False` (the template already carries any BOS token);
* the continuation y is tokenized on its own (`add_special_tokens=False`), so the conditional and
  the marginal request for one y score exactly the same token ids whatever the prompt;
* the scored tokens are y's tokens followed by the template's end-of-turn token (`<|im_end|>` for
  SmolLM2, `<|eot_id|>` for Llama 3.1). log p(y) is thus the probability that the answer is exactly y
  and then ends, not that it merely starts with y. `n_tokens` counts that end-of-turn token. Prompt
  tokens are never scored. An empty continuation is refused.
* a request longer than the model's window is cut by the rule of tasks/lm/fitting.py before any
  batching (its result says `truncated`), so no input can ask for more than one window's memory.

Computation: log-softmax in float32 over the full vocabulary (torch's log_softmax; a head below
float32 has the target's own logit recomputed in float32 first), and only the scored positions
pass through the output head. Identical requests are computed once, and so is a start that every
continuation of one prompt shares (`split_shared_starts`: a review before each rating it could get).
Prompts common to many requests are computed once: the prompts of a call are split into clusters
that share a long token prefix (`prompt_clusters`: e.g. every oracle question quoting one candidate
review), the longest prefix shared by a cluster (template head, system prompt, the quoted text) is
run once and its KV cache expanded across the batch; each distinct prompt body is run once and its KV reused by all continuations that follow it.
Batches are packed longest first under a padded-token budget; padding sits after each sequence
(and between a short body and its continuation) and is masked, with explicit position ids.
With SDPA (a GPU with flex attention, or a CPU) a batch is one flat sequence instead: the head once,
then the rows, under the block-sparse rule of tasks/lm/flat_attention.py (no padding between rows, no
head KV copied, and attention only over the pairs the rule allows: flex attention's blocks on a GPU,
runs of queries on their visible keys on a CPU; on a GPU the decoder's layers are compiled around
flex attention, so norms, rotary embedding and activation fuse).
Everything is ordered by content, so the result of a request does not depend on the order of the
call. Models whose logits are not a plain linear head over the last hidden state are refused.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from tasks.core.progress import track
from tasks.lm.batching import batches
from tasks.lm.cpu import release_freed
from tasks.lm.fitting import fit_request, request_window
from tasks.lm.flat_attention import compile_layers, flat_mask, may_attend, use_flat_attention
from tasks.lm.loading import Tokens, chat_ids, common_prefix, end_of_turn
from tasks.lm.types import LoglikelihoodRequest, LoglikelihoodResult

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase
    from transformers.cache_utils import Cache

KV = list[tuple[torch.Tensor, torch.Tensor]]
Work = tuple[int, Tokens, Tokens]          # (slot of the prompt in its chunk, prompt, target)


@dataclass
class EngineStats:
    """Work counters (real tokens only, padding excluded), for throughput and FLOP figures."""

    requests: int = 0
    unique: int = 0
    forward_tokens: int = 0      # tokens passed through the decoder
    attention_pairs: int = 0     # (query, key) pairs attended to, per layer
    head_rows: int = 0           # positions passed through the output head
    padded_tokens: int = 0       # tokens computed including padding
    batches: int = 0
    truncated: int = 0           # requests cut to fit the window (tasks/lm/fitting.py)


def encode_request(tokenizer: PreTrainedTokenizerBase, request: LoglikelihoodRequest,
                   eot: Tokens) -> tuple[Tokens, Tokens]:
    """(prompt ids, scored ids) of a request under the convention in the module docstring."""
    if not request.continuation.strip():
        raise ValueError("empty continuation: there is nothing to score")
    prompt = chat_ids(tokenizer, request.system, request.user)
    target = tuple(tokenizer(request.continuation, add_special_tokens=False)["input_ids"]) + eot
    return prompt, target


def _check_model(model: PreTrainedModel) -> None:
    config = model.config
    if getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None):
        raise NotImplementedError(f"{config.model_type}: logits are not a plain linear head; not supported")
    if "sliding_attention" in (getattr(config, "layer_types", None) or ()):
        raise NotImplementedError(f"{config.model_type}: sliding-window attention is not supported")
    if any(type(m).__module__.startswith("torch.ao.nn.quantized") for m in model.modules()):
        # one activation scale per batch: a value would depend on its batchmates (tasks/lm/loading.py)
        raise NotImplementedError("dynamic int8 layers: log-likelihoods are computed on the float model")


SHARED_MIN = 32   # tokens a cluster of prompts must share beyond the call's common prefix to get its own head


def prompt_clusters(prompts: Sequence[Tokens], shared_min: int = SHARED_MIN) -> list[list[Tokens]]:
    """The prompts (sorted) in clusters that each share a long prefix: every cluster of two or more
    shares at least `shared_min` tokens more than the whole call does (e.g. an oracle's questions that
    all quote one candidate review); the prompts in no such cluster form one cluster of their own."""
    ordered = sorted(set(prompts))
    if len(ordered) < 2:
        return [ordered]
    floor = common_prefix(ordered) + shared_min
    runs: list[list[Tokens]] = [[ordered[0]]]
    for before, prompt in zip(ordered, ordered[1:], strict=False):
        if common_prefix([before, prompt]) >= floor:
            runs[-1].append(prompt)
        else:
            runs.append([prompt])
    shared = [run for run in runs if len(run) > 1]
    rest = sorted(p for run in runs if len(run) == 1 for p in run)
    return shared + ([rest] if rest else [])


SPLIT_MIN = 16   # tokens every continuation of one prompt must share before that start is computed once


def split_shared_starts(groups: dict[Tokens, set[Tokens]], split_min: int = SPLIT_MIN
                        ) -> tuple[dict[Tokens, set[Tokens]], dict[tuple[Tokens, Tokens], int]]:
    """Continuations of one prompt that all start alike (a rating read after a whole review: the review
    and its tag, then each scale value) have that start scored once: the prompt gets the shared start as
    its one continuation, and prompt + start gets each continuation's rest. Returns the groups to score
    and, per original (prompt, target) that was split, the length of the start (the result is the two
    parts' values joined). Starts shorter than `split_min` tokens stay as they are (not worth a row)."""
    out: dict[Tokens, set[Tokens]] = {}
    splits: dict[tuple[Tokens, Tokens], int] = {}
    for prompt, targets in groups.items():
        shared = min(common_prefix(list(targets)), min(map(len, targets)) - 1) if len(targets) > 1 else 0
        if shared < split_min:
            out.setdefault(prompt, set()).update(targets)
            continue
        start = next(iter(targets))[:shared]
        out.setdefault(prompt, set()).add(start)
        out.setdefault(prompt + start, set()).update(t[shared:] for t in targets)
        splits.update({(prompt, t): shared for t in targets})
    return out, splits


Unit = tuple[Tokens, tuple[Tokens, ...]]   # a prompt and (some of) its continuations
Row = list[Unit]                            # prompts laid out together (sorted), as one prefix tree
FLAT_QUANTUM = 128   # a flat batch is padded to a multiple of this (flex attention's block size)
ROW_MAX = 4096   # tokens of a row holding several prompts (within the token budget): a judge's prompts
                 # quoting one paper's human reviews (1.4k tokens each) share them only in a long row


def body_shared(a: Tokens, b: Tokens) -> int:
    """Tokens two prompts' bodies (all but the last token, which starts each continuation) share."""
    return min(common_prefix([a, b]), len(a) - 1, len(b) - 1)


def row_length(row: Row, head_len: int) -> int:
    """Tokens of the row after the call's head: its prompts' bodies as a prefix tree (a token that
    several prompts share counted once), then every continuation."""
    length = 0
    for k, (prompt, targets) in enumerate(row):
        start = head_len if k == 0 else max(head_len, body_shared(row[k - 1][0], prompt))
        length += len(prompt) - 1 - start + sum(map(len, targets))
    return length


def packed_rows(units: Sequence[Unit], head_len: int, row_max: int) -> list[Row]:
    """The units (in prompt order) split into consecutive rows so that the fewest tokens are computed,
    each row within `row_max` tokens (one unit alone may be longer). Within a row every token that
    neighbouring prompts share is computed once, however deep the sharing goes (a judge's prompts
    that quote one paper's synopsis and then differ in one of its reviews share the synopsis with all
    and each review with some), so a row costs its tokens less what its neighbours share, and a cut
    between rows costs what the two sides share.

    Dynamic programming over the split points; prompts are sorted, so a row's length grows by a
    unit's own tokens less what it shares with the next one as the row grows to the left: O(1)
    per candidate row."""
    n = len(units)
    if n == 0:
        return []
    shared = [max(head_len, body_shared(units[k][0], units[k + 1][0])) - head_len for k in range(n - 1)]
    own = [len(prompt) - 1 - head_len + sum(map(len, targets)) for prompt, targets in units]
    best: list[int | None] = [0] + [None] * n     # tokens of the best split of units[:j]
    cut = [0] * (n + 1)                           # where its last row starts
    for j in range(1, n + 1):
        length = 0
        for i in range(j - 1, -1, -1):
            length += own[i] - (shared[i] if i < j - 1 else 0)    # = row_length(units[i:j], head_len)
            if i < j - 1 and length > row_max:
                break                                             # it only grows to the left
            if best[j] is None or best[i] + length < best[j]:     # type: ignore[operator]
                best[j], cut[j] = best[i] + length, i             # type: ignore[operator]
    rows: list[Row] = []
    j = n
    while j:
        rows.append(list(units[cut[j]:j]))
        j = cut[j]
    return rows[::-1]


@dataclass
class LaidOut:
    """One packed row as the decoder reads it, after the call's head (`lay_out`)."""

    tokens: list[int]
    positions: list[int]
    end: list[int]                        # per token: where the stretch that descends from it ends (row index)
    spans: list[list[tuple[int, int]]]    # per prompt, per continuation: (start, length) of its scored positions
    pairs: int                            # (query, key) pairs the row attends to, the head included


def lay_out(row: Row, head_len: int) -> LaidOut:
    """The row's prompt bodies as a prefix tree in depth-first order: each prompt from where it parts
    from the one before, then its continuations, each starting with the prompt's last token (so its
    positions predict its own tokens). A prompt token's stretch ends where the last prompt sharing it
    ends; a continuation token's where its continuation does (`may_attend`)."""
    out = LaidOut([], [], [], [], 0)
    open_tokens: list[tuple[int, int]] = []    # (depth, row index) of prompt tokens whose stretch is open
    before: Tokens | None = None
    for prompt, targets in row:
        body = len(prompt) - 1
        start = head_len if before is None else max(head_len, body_shared(before, prompt))
        while open_tokens and open_tokens[-1][0] >= start:       # not shared with this prompt: closed
            out.end[open_tokens.pop()[1]] = len(out.tokens)
        for depth in range(start, body):
            open_tokens.append((depth, len(out.tokens)))
            out.tokens.append(prompt[depth])
            out.positions.append(depth)
            out.end.append(-1)
        own = []
        for target in targets:
            first, length = len(out.tokens), len(target)
            own.append((first, length))
            out.tokens += [prompt[-1], *target[:-1]]
            out.positions += range(body, body + length)
            out.end += [first + length] * length
        out.spans.append(own)
        before = prompt
    for _, index in open_tokens:
        out.end[index] = len(out.tokens)
    out.pairs = sum(out.positions) + len(out.positions)     # each token sees every position up to its own
    return out


class LoglikelihoodEngine:
    """Batched, prefix-sharing scorer of continuations; see the module docstring for the rules."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, token_budget: int = 4096,
                 head_rows: int = 256, packed: bool = True, flat: bool | None = None, compiled: bool | None = None):
        _check_model(model)
        self.packed = packed
        # flat batches under a block-sparse rule ("flex" on a GPU, "paths" on a CPU), padded rows where
        # neither runs; `flat=False` keeps the padded rows (tests compare both layouts)
        self.sparsity = use_flat_attention(model) if packed else None
        self.flat = packed and (self.sparsity is not None if flat is None else flat)
        # on a GPU flat batches run the decoder's layers compiled around flex attention (in place: the
        # model is the engine's); `compiled=False` and the padded rows run them eagerly
        if self.sparsity == "flex":
            compile_layers(model, self.flat and compiled is not False)
        self.model, self.tokenizer = model, tokenizer
        # the output head runs `head_rows` positions at a time: their logits and log-softmax over a vocabulary
        # of 49,152 (SmolLM2) are 2 x 50 MB at 256 rows, 2 x 200 MB at 1,024, for the same speed on a CPU
        self.token_budget, self.head_rows = token_budget, head_rows
        self.decoder = model.base_model
        heads = model.config.num_attention_heads
        self.fold = heads // (getattr(model.config, "num_key_value_heads", None) or heads)   # query heads per KV head
        self.lm_head = model.get_output_embeddings()
        self.device = model.device
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.eot = end_of_turn(tokenizer)
        self.window = request_window(getattr(model.config, "max_position_embeddings", None))
        self.stats = EngineStats()
        self._lock = threading.Lock()
        self._heads: OrderedDict[Tokens, KV] = OrderedDict()
        self._prompts: dict[tuple[str, str], Tokens] = {}

    # -- public -------------------------------------------------------------------------------

    def encode(self, request: LoglikelihoodRequest) -> tuple[Tokens, Tokens]:
        if not request.continuation.strip():
            raise ValueError("empty continuation: there is nothing to score")
        key = (request.system, request.user)
        if key not in self._prompts:
            if len(self._prompts) > 4096:
                self._prompts.clear()
            self._prompts[key] = chat_ids(self.tokenizer, request.system, request.user)
        target = tuple(self.tokenizer(request.continuation, add_special_tokens=False)["input_ids"])
        return self._prompts[key], target + self.eot

    def score(self, requests: Sequence[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        """One result per request, in the order given."""
        with self._lock, torch.inference_mode():
            fitted = [fit_request(*self.encode(r), self.eot, self.window) for r in requests]
            items = [(prompt, target) for prompt, target, _ in fitted]
            self.stats.truncated += sum(cut for _, _, cut in fitted)
            groups: dict[Tokens, set[Tokens]] = {}
            for prompt, target in items:
                groups.setdefault(prompt, set()).add(target)
            groups, splits = split_shared_starts(groups)
            done: dict[tuple[Tokens, Tokens], torch.Tensor] = {}
            if groups:
                (self._score_packed if self.packed else self._score_groups)(groups, done)
            for (prompt, target), shared in splits.items():
                done[(prompt, target)] = torch.cat([done[(prompt, target[:shared])],
                                                    done[(prompt + target[:shared], target[shared:])]])
            self.stats.requests += len(items)
            self.stats.unique += len(done)
            results = []
            for item, (_, _, cut) in zip(items, fitted, strict=True):
                values = done[item]
                results.append(LoglikelihoodResult(float(values.sum()), len(item[1]), tuple(values.tolist()), cut))
            return results

    # -- internals ----------------------------------------------------------------------------

    def _score_groups(self, groups: dict[Tokens, set[Tokens]], done: dict[tuple[Tokens, Tokens], torch.Tensor]) -> None:
        plan: list[tuple[list[Tokens], int, list[int]]] = []
        for cluster in prompt_clusters(list(groups)):
            shortest = min(map(len, cluster))
            head_len = min(common_prefix(cluster), shortest - 1)
            if head_len == 0 and shortest < 2:
                raise ValueError("prompts share no prefix and one has a single token: nothing to attend to")
            chunks = batches(cluster, lambda p, h=head_len: len(p) - 1 - h, self.token_budget,
                             key=lambda p: (-(len(p) + max(map(len, groups[p]))), p))
            plan += [(cluster, head_len, chunk_ids) for chunk_ids in chunks]
        # A progress bar on a terminal, progress lines with an ETA in a log (tasks/core/progress.py).
        for cluster, head_len, chunk_ids in track(plan, "scoring", "batch"):
            head = self._head(cluster[0][:head_len])   # a cluster's chunks follow each other: its head is reused
            chunk = [cluster[i] for i in chunk_ids]
            past, past_mask = self._bodies(chunk, head, head_len)
            work: list[Work] = [(slot, p, t) for slot, p in enumerate(chunk) for t in groups[p]]
            for batch_ids in batches(work, lambda w: len(w[2]), self.token_budget,
                                     key=lambda w: (-len(w[2]), w[0], w[2])):
                batch = [work[i] for i in batch_ids]
                values = self._continuations(batch, past, past_mask)
                for (_, prompt, target), value in zip(batch, values, strict=True):
                    done[(prompt, target)] = value
            self._release()

    def _score_packed(self, groups: dict[Tokens, set[Tokens]], done: dict[tuple[Tokens, Tokens], torch.Tensor]) -> None:
        """Prompts in rows: a row holds one prompt's body and every continuation after it, or several
        prompts laid out as one prefix tree (`packed_rows`, `lay_out`: an oracle's questions quoting one
        candidate, a judge's prompts quoting one paper's reviews), each token they share once, then each
        prompt's own part and its continuations. Under the attention rule each token sees the call's
        head and its ancestors only, so nothing is computed twice and no KV is copied per continuation;
        rows of similar length share a batch."""
        prompts = list(groups)
        shortest = min(map(len, prompts))
        head_len = min(common_prefix(prompts), shortest - 1)
        if head_len == 0 and shortest < 2:
            raise ValueError("prompts share no prefix and one has a single token: nothing to attend to")
        head = None if self.flat else self._head(min(prompts)[:head_len])   # a flat batch computes it in place
        units: list[Unit] = []
        for prompt in sorted(prompts):
            body = len(prompt) - 1 - head_len
            targets: list[Tokens] = []
            for target in sorted(groups[prompt], key=lambda t: (-len(t), t)):
                if targets and body + sum(map(len, targets)) + len(target) > self.token_budget:
                    units.append((prompt, tuple(targets)))
                    targets = []
                targets.append(target)
            units.append((prompt, tuple(targets)))
        rows = packed_rows(units, head_len, min(self.token_budget, ROW_MAX))
        chunks = batches(rows, lambda r: row_length(r, head_len), self.token_budget,
                         key=lambda r: (-row_length(r, head_len), r))
        keys: list[tuple[Tokens, Tokens]] = []
        parts: list[torch.Tensor] = []
        for chunk_ids in track(chunks, "scoring", "batch"):
            chunk = [rows[i] for i in chunk_ids]
            parts.append(self._packed_rows(chunk, head, head_len))
            keys += [(prompt, target) for row in chunk for prompt, targets in row for target in targets]
            self._release()
        # one copy back at the end: no batch waits for the device, which runs while the next one is packed
        values = torch.cat(parts).double().cpu().split([len(target) for _, target in keys])
        done.update(zip(keys, values, strict=True))

    def _packed_rows(self, chunk: list[Row], head: KV | None, head_len: int) -> torch.Tensor:
        """The per-token log-probs of every continuation of the chunk, row by row, prompt by prompt, on
        the device (one forward pass for the chunk)."""
        if self.flat:
            return self._flat_rows(chunk, min(row[0][0] for row in chunk)[:head_len])
        n = len(chunk)
        laid = [lay_out(row, head_len) for row in chunk]
        width = max(len(r.tokens) for r in laid)
        tokens = torch.full((n, width), self.pad_id, dtype=torch.long)
        pos_ids = torch.zeros((n, width), dtype=torch.long)
        allowed = torch.zeros((n, 1, width, head_len + width), dtype=torch.bool)
        allowed[:, :, :, :head_len] = True
        index = torch.arange(width)
        for i, r in enumerate(laid):
            tokens[i, : len(r.tokens)] = torch.tensor(r.tokens, dtype=torch.long)
            pos_ids[i, : len(r.tokens)] = torch.tensor(r.positions, dtype=torch.long)
            # padding after the row: each token its own stretch (it sees the head and itself)
            end = torch.tensor(r.end + list(range(len(r.tokens) + 1, width + 1)), dtype=torch.long)
            allowed[i, 0, :, head_len:] = may_attend(end, index[:, None], index[None, :])
            self.stats.forward_tokens += len(r.tokens)
            self.stats.attention_pairs += r.pairs
        cache = None
        if head is not None:
            from transformers import DynamicCache

            cache = DynamicCache([(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)) for k, v in head])
        out = self.decoder(input_ids=tokens.to(self.device), attention_mask=allowed.to(self.device),
                           position_ids=pos_ids.to(self.device), past_key_values=cache, use_cache=cache is not None)
        self.stats.batches += 1
        self.stats.padded_tokens += tokens.numel()
        hidden = out.last_hidden_state
        return self._read_rows(chunk, [(hidden[i], r.spans) for i, r in enumerate(laid)])

    def _flat_rows(self, chunk: list[Row], head: Tokens) -> torch.Tensor:
        """`_packed_rows` as one flat sequence under a block-sparse mask (tasks/lm/flat_attention.py): the
        head, then every row; nothing is padded between rows and no KV is copied. On a GPU the head is
        part of the sequence (one kernel launch per layer for it all); on a CPU its KV is computed once
        per call and attended to as the past of every batch."""
        head_len = len(head)
        past = self._head(head) if self.sparsity == "paths" else None
        lead = 0 if past is not None else head_len      # head tokens inside the sequence
        tokens, positions = list(head[:lead]), list(range(lead))
        ends: list[int] = []          # each row's `end` tags, shifted to the sequence
        spans = []
        for row in chunk:
            r = lay_out(row, head_len)
            offset = len(tokens)
            tokens += r.tokens
            positions += r.positions
            ends += [offset + e for e in r.end]
            spans.append([[(offset + start, length) for start, length in own] for own in r.spans])
            self.stats.attention_pairs += r.pairs
        self.stats.forward_tokens += len(tokens)
        # flex attention works in blocks of FLAT_QUANTUM; the CPU's segments take any length
        width = -(-len(tokens) // FLAT_QUANTUM) * FLAT_QUANTUM if self.sparsity == "flex" else len(tokens)
        # the head's stretch is the whole sequence; each padding token's is itself
        ends = [width] * lead + ends + list(range(len(tokens) + 1, width + 1))
        tokens, positions = tokens + [self.pad_id] * (width - len(tokens)), positions + [0] * (width - len(tokens))
        laid = self._to_device(torch.tensor([ends, tokens, positions], dtype=torch.long))
        mask = flat_mask(laid[0], self.sparsity, past=head_len - lead, fold=self.fold)
        cache = None
        if past is not None:
            from transformers import DynamicCache

            cache = DynamicCache(past)
        out = self.decoder(input_ids=laid[1:2], attention_mask=mask, position_ids=laid[2:3],
                           past_key_values=cache, use_cache=cache is not None)
        self.stats.batches += 1
        self.stats.padded_tokens += width
        hidden = out.last_hidden_state[0]
        return self._read_rows(chunk, [(hidden, row_spans) for row_spans in spans])

    def _read_rows(self, chunk: list[Row], hidden_spans: list[tuple[torch.Tensor, list[list[tuple[int, int]]]]]
                   ) -> torch.Tensor:
        """The per-token log-probs of every continuation of the chunk (on the device, in row, prompt and
        continuation order), from the hidden states at its span (one (hidden, spans) per row: spans per
        prompt, (start, length) per continuation)."""
        picks, targets_flat = [], []
        for row, (hidden, spans) in zip(chunk, hidden_spans, strict=True):
            for (_, targets), own in zip(row, spans, strict=True):
                for target, (start, length) in zip(targets, own, strict=True):
                    picks.append(hidden[start : start + length])
                    targets_flat.extend(target)
        rows = torch.cat(picks)
        wanted = self._to_device(torch.tensor(targets_flat, dtype=torch.long))
        self.stats.head_rows += rows.shape[0]
        return torch.cat([self._head_logprobs(rows[i : i + self.head_rows], wanted[i : i + self.head_rows])
                          for i in range(0, rows.shape[0], self.head_rows)])

    def _release(self) -> None:
        if self.device.type == "cpu":
            release_freed()

    def _to_device(self, values: torch.Tensor) -> torch.Tensor:
        """A host tensor on the model's device; to a GPU from pinned memory without waiting for the
        device (a copy from pageable memory would wait for every kernel queued before it)."""
        if self.device.type != "cuda":
            return values.to(self.device)
        return values.pin_memory().to(self.device, non_blocking=True)

    def _forward(self, ids: list[Tokens], past: KV | None, past_mask: torch.Tensor | None,
                 start: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Cache]:
        """Right-padded forward of `ids` after `past`; `start[i]` is the position of ids[i][0]."""
        width = max(map(len, ids))
        tokens = torch.full((len(ids), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(ids), width), dtype=torch.long)
        for i, seq in enumerate(ids):
            tokens[i, : len(seq)] = torch.tensor(seq, dtype=torch.long)
            mask[i, : len(seq)] = 1
        positions = start[:, None] + torch.arange(width)[None, :]
        full_mask = mask if past_mask is None else torch.cat([past_mask, mask], dim=1)
        cache = None
        if past is not None:
            from transformers import DynamicCache

            cache = DynamicCache(past)
        out = self.decoder(
            input_ids=tokens.to(self.device),
            attention_mask=full_mask.to(self.device),
            position_ids=positions.to(self.device),
            past_key_values=cache,
            use_cache=True,
        )
        self.stats.batches += 1
        self.stats.padded_tokens += tokens.numel()
        for i, seq in enumerate(ids):
            context = int(start[i])   # real tokens before seq[0]
            self.stats.forward_tokens += len(seq)
            self.stats.attention_pairs += len(seq) * context + len(seq) * (len(seq) + 1) // 2
        return out.last_hidden_state, full_mask, out.past_key_values

    def _head(self, head: Tokens) -> KV | None:
        """KV cache (batch 1) of the prefix shared by every prompt of the call, kept for reuse."""
        if not head:
            return None
        if head in self._heads:
            self._heads.move_to_end(head)
            return self._heads[head]
        if self.sparsity == "paths":
            # the head as a one-segment flat batch: its tokens get the values they would get inside any row
            length = len(head)
            laid = torch.tensor([head, range(length)], dtype=torch.long)
            mask = flat_mask(torch.full((length,), length), self.sparsity, fold=self.fold)
            cache = self.decoder(input_ids=laid[0:1], attention_mask=mask, position_ids=laid[1:2],
                                 use_cache=True).past_key_values
            self.stats.batches += 1
            self.stats.forward_tokens += length
            self.stats.padded_tokens += length
            self.stats.attention_pairs += length * (length + 1) // 2
        else:
            _, _, cache = self._forward([head], None, None, torch.zeros(1, dtype=torch.long))
        kv = [(layer.keys, layer.values) for layer in cache.layers]
        self._heads[head] = kv
        while len(self._heads) > 4:
            self._heads.popitem(last=False)
        return kv

    def _bodies(self, chunk: list[Tokens], head: KV | None, head_len: int) -> tuple[KV | None, torch.Tensor | None]:
        """KV cache and mask of [head | body] for each prompt of the chunk (body: all but the last token)."""
        n = len(chunk)
        expanded = None if head is None else [(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)) for k, v in head]
        head_mask = None if head is None else torch.ones((n, head_len), dtype=torch.long)
        bodies = [p[head_len:-1] for p in chunk]
        if not max(map(len, bodies)):
            return expanded, head_mask
        start = torch.full((n,), head_len, dtype=torch.long)
        _, mask, cache = self._forward(bodies, expanded, head_mask, start)
        return [(layer.keys, layer.values) for layer in cache.layers], mask

    def _continuations(self, batch: list[Work], past: KV | None,
                       past_mask: torch.Tensor | None) -> list[torch.Tensor]:
        """Per-token log-probs (float32, CPU) of each target given its prompt's cached KV."""
        slots = torch.tensor([slot for slot, _, _ in batch], dtype=torch.long)
        ids = [(prompt[-1], *target[:-1]) for _, prompt, target in batch]
        start = torch.tensor([len(prompt) - 1 for _, prompt, _ in batch], dtype=torch.long)
        sel_past = None
        sel_mask = None
        if past is not None and past_mask is not None:
            index = slots.to(self.device)
            sel_past = [(k.index_select(0, index), v.index_select(0, index)) for k, v in past]
            sel_mask = past_mask.index_select(0, slots)
        hidden, _, _ = self._forward(ids, sel_past, sel_mask, start)
        lengths = [len(target) for _, _, target in batch]
        rows = torch.cat([hidden[i, :n] for i, n in enumerate(lengths)])
        targets = torch.tensor([t for _, _, target in batch for t in target], device=rows.device)
        values = torch.cat([self._head_logprobs(rows[i : i + self.head_rows], targets[i : i + self.head_rows])
                            for i in range(0, rows.shape[0], self.head_rows)])
        self.stats.head_rows += rows.shape[0]
        return list(values.double().cpu().split(lengths))

    def _head_logprobs(self, rows: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """log p(target) at each row. Below float32 the head's logits are rounded to the model's dtype (in
        bfloat16 a logit of 20 moves by up to 0.06), so the target's own logit is recomputed in float32
        (one dot product per row) before the log-softmax: a continuation's sum then carries no rounding
        of the very logits it adds up, only of the normalizer (mean error against a float32 reference,
        48 dev-file requests on SmolLM2: 0.60 -> 0.49 nats; the bf16 naive method: 0.53)."""
        logits = self.lm_head(rows).float()
        if logits.dtype != self.lm_head.weight.dtype:
            exact = (rows.float() * self.lm_head.weight[targets].float()).sum(dim=-1)
            if self.lm_head.bias is not None:
                exact += self.lm_head.bias[targets].float()
            logits.scatter_(1, targets[:, None], exact[:, None])
        return logits.log_softmax(dim=-1).gather(1, targets[:, None]).squeeze(1)


def reference_score(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                    requests: Sequence[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
    """The plain computation the engine must reproduce: one full forward pass per request over
    prompt + y, full-vocabulary log_softmax in float32 at every position, nothing shared."""
    eot = end_of_turn(tokenizer)
    results = []
    with torch.inference_mode():
        for request in requests:
            prompt, target = encode_request(tokenizer, request, eot)
            ids = torch.tensor([prompt + target], device=model.device)
            logprobs = model(input_ids=ids).logits[0].float().log_softmax(dim=-1)
            scored = logprobs[len(prompt) - 1 : -1].gather(1, ids[0, len(prompt) :, None]).squeeze(1)
            values = scored.double().cpu()
            results.append(LoglikelihoodResult(float(values.sum()), len(target), tuple(values.tolist())))
    return results
