"""Greedy decoding for the local backend without transformers' `generate` loop (`LocalLM(decoder="fast")`).

The same answers as `model.generate(do_sample=False)` with the line-prefix constraint, computed with
less work:

* **prefill without padding**: the prefix shared by every prompt of the call (chat template head
  and system prompt), and the longer prefix shared by each cluster of its prompts (a judge's
  prompts that quote one paper's synopsis and reviews before each candidate), is run once and its
  KV kept for later calls (a few, least recently used; a later prompt starting with a kept prefix
  reuses it); each prompt's body then runs alone on top of it, so no padded position is ever
  computed and attention runs without a padding mask;
* **shared heads read in place** (`share_heads`, tasks/lm/shared_heads.py): each step attends to a
  prompt head where it is, once for all the rows starting with it, and then to each row's own
  columns; the buffer below holds only what follows each head (a float32 or int8 model; others
  copy the head into every row);
* **one preallocated KV buffer per layer** (`SlotLayer`): the prompts' KV are laid out
  left-padded in a buffer sized for the longest prompt plus the answer, and each decoding step
  writes its column in place, instead of copying the whole cache every step (`torch.cat`);
* **a repeated prompt is run once**: the same prompt twice in a call (the draws of one sampled
  question) has its KV copied from the first row, not computed again (the same numbers: both
  would run alone on the same head);
* **finished rows leave the batch**: when a row ends (a stop token or its own `max_tokens`) the
  buffer is compacted to the rows still running;
* **the constraint's masks are precomputed per state** (`LinePrefixConstraint.allowed`), one
  boolean row per answer per step, applied as one masked fill;
* **drafts copied from the context** (`draft_tokens` > 0, prompt lookup): where the last few tokens
  of a row occurred before in its prompt or answer, the tokens that followed them there are fed
  along with the row's next token, and one forward pass checks them all. A drafted token is kept
  while it equals the (constrained) argmax at its position, and the model's own token at the first
  mismatch comes with them, so the answer is the one step-by-step greedy decoding gives. A step is
  bound by reading the weights, so checking a few tokens costs about as much as one; answers that
  copy their input (judgments quote the review) or repeat themselves take several tokens a step.
  Rows keep different numbers of drafted tokens: every row writes the same KV columns, the rejected
  ones are masked out for good and each row carries its own positions; when the buffer is full the
  holes are squeezed out (`SlotLayer.gather`).

Greedy decoding is deterministic; the only difference from `generate` is the order of float
additions inside the matmuls (a prompt computed alone vs in a padded batch), which can flip an
exact near-tie between two tokens. `bench/speed/generate_speed.py` checks the answers against the
`generate` path byte for byte.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

from tasks.lm import shared_heads
from tasks.lm.flat_attention import use_dispatching_attention
from tasks.lm.loading import Tokens, common_prefix
from tasks.lm.loops import LoopWatch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from tasks.lm.line_prefixes import LinePrefixConstraint

KV = list[tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class Sampling:
    """Sampled decoding: the temperature and one seed per prompt (a prompt's generator is its own)."""

    temperature: float
    seeds: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError(f"a sampling temperature must be above 0, not {self.temperature}")

    def generators(self) -> list[torch.Generator]:
        return [torch.Generator().manual_seed(seed) for seed in self.seeds]


class SlotLayer(DynamicLayer):
    """One layer's KV in a preallocated buffer [batch, heads, capacity, dim]; `update` writes
    the new columns in place and returns views of the filled part."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, used: int) -> None:
        super().__init__()
        self.buffer_keys, self.buffer_values, self.used = keys, values, used
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True
        self._view()

    def _view(self) -> None:
        self.keys = self.buffer_keys[:, :, : self.used]
        self.values = self.buffer_values[:, :, : self.used]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        n = key_states.shape[-2]
        self.buffer_keys[:, :, self.used : self.used + n] = key_states
        self.buffer_values[:, :, self.used : self.used + n] = value_states
        self.used += n
        self._view()
        return self.keys, self.values

    def keep(self, rows: torch.Tensor) -> None:
        """Only these batch rows go on (a copy of the buffer, done once per finished row)."""
        self.buffer_keys = self.buffer_keys.index_select(0, rows)
        self.buffer_values = self.buffer_values.index_select(0, rows)
        self._view()

    def gather(self, columns: torch.Tensor) -> None:
        """Move columns[r] of each row r to the front of the buffer (the new filled part)."""
        rows, width = columns.shape
        index = columns[:, None, :, None].expand(rows, self.buffer_keys.shape[1], width, self.buffer_keys.shape[3])
        self.buffer_keys[:, :, :width] = self.buffer_keys.gather(2, index.to(self.device))
        self.buffer_values[:, :, :width] = self.buffer_values.gather(2, index.to(self.device))
        self.used = width
        self._view()


class FinishedSequences:
    """The KV of the last sequences a decoder finished (prompt and answer), for later requests that start
    with one of them: vLLM's automatic prefix caching keeps a finished sequence's blocks the same way, so
    a question asked right after an answer (a served candidate's rating of the review it wrote) computes
    only what follows it. At most `most_tokens` tokens are kept, the oldest sequence dropped first."""

    def __init__(self, most_tokens: int) -> None:
        self.most_tokens = most_tokens
        self._kept: OrderedDict[Tokens, KV] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, ids: Sequence[int], kv: KV) -> None:
        with self._lock:
            self._kept[tuple(ids)] = kv
            self._kept.move_to_end(tuple(ids))
            while sum(map(len, self._kept)) > self.most_tokens and len(self._kept) > 1:
                self._kept.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()

    def longest(self, ids: Sequence[int]) -> tuple[int, KV]:
        """(n, the KV of a kept sequence's first n tokens) for the kept sequence sharing the longest
        prefix with `ids` (0 and no KV when none shares a token); the tensors are not to be written."""
        with self._lock:
            best, kv = 0, []
            for kept, layers in self._kept.items():
                n = common_prefix([kept, tuple(ids)])
                if n > best:
                    best, kv = n, layers
            return best, [(k[:, :, :best], v[:, :, :best]) for k, v in kv]


_FINISHED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_FINISHED_LOCK = threading.Lock()


def keep_finished(model: PreTrainedModel, most_tokens: int = 8192) -> FinishedSequences:
    """From now on every `GreedyDecoder` on `model` keeps the KV of the sequences it finishes here, at
    most `most_tokens` tokens of them (SmolLM2-135M in float32: 46 KB a token, 375 MB in all)."""
    with _FINISHED_LOCK:
        return _FINISHED.setdefault(model, FinishedSequences(most_tokens))


def finished_sequences(model: PreTrainedModel) -> FinishedSequences | None:
    """The finished sequences kept for `model` (`keep_finished`), or None when none are kept."""
    with _FINISHED_LOCK:
        return _FINISHED.get(model)


class PromptLookup:
    """Draft tokens for one row: the tokens that followed the latest earlier occurrence of the
    row's last `n` tokens (n from `sizes`, longest first) in its prompt and answer so far."""

    def __init__(self, tokens: Sequence[int], sizes: tuple[int, ...] = (3, 2)) -> None:
        self.tokens = list(tokens)
        self.sizes = sizes
        self._next: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in sizes}  # n-gram -> index after it
        for end in range(1, len(self.tokens)):
            self._index(end)

    def _index(self, end: int) -> None:
        for n in self.sizes:
            if end >= n:
                self._next[n][tuple(self.tokens[end - n : end])] = end

    def extend(self, tokens: Sequence[int]) -> None:
        for token in tokens:
            self.tokens.append(token)
            self._index(len(self.tokens) - 1)

    def draft(self, most: int) -> list[int]:
        if most <= 0:
            return []
        for n in self.sizes:
            at = self._next[n].get(tuple(self.tokens[-n:]))
            if at is not None:
                return self.tokens[at : at + most]
        return []


class GreedyDecoder:
    """Greedy decoding on one causal LM; keeps the KV of a few shared prompt heads between calls.
    `draft_tokens`: the most tokens drafted per row and step (0: one token per step, no drafts);
    `draft_budget`: the most tokens one step feeds in all, so a full batch drafts little (its step
    already costs compute) and the last rows draft much (their step costs reading the weights);
    `share_heads`: the steps attend to each prompt head where it is, once for every row starting with
    it, instead of to a copy in each row (where the model allows it: `shared_heads.can_share`)."""

    def __init__(self, model: PreTrainedModel, heads_kept: int = 4, draft_tokens: int = 0,
                 draft_budget: int = 16, share_heads: bool = True) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.heads_kept = heads_kept
        self.draft_tokens = draft_tokens
        self.draft_budget = draft_budget
        self.spare_columns = 16 * (draft_tokens + 1)   # KV room for rejected columns before a squeeze
        self.forwards = 0          # decoding forward passes (prompts not counted)
        self.drafted = 0           # drafted tokens fed / kept
        self.kept = 0
        self.squeezes = 0          # times the KV buffer's rejected columns were dropped
        self.prefilled = 0         # prompt bodies run (a prompt repeated in one call runs once)
        self._heads: OrderedDict[Tokens, KV] = OrderedDict()
        # the steps read each shared head in place, once for the rows sharing it (tasks/lm/shared_heads.py)
        self.share_heads = share_heads and shared_heads.can_share(model) and use_dispatching_attention(model)

    def generate(self, prompts: Sequence[Tokens], limits: Sequence[int], stops: set[int],
                 constraint: LinePrefixConstraint | None = None, prefills: Sequence[str] | None = None,
                 step_threads: int | None = None, sampling: Sampling | None = None, stop_loops: bool = False,
                 ) -> list[list[int]]:
        """The answer tokens of each prompt, up to and including its first stop token or cut at
        its limit (the caller cuts at the stop, as it does for `generate`); with `stop_loops`, a row
        whose answer ends in a loop (tasks/lm/loops.py) stops there too. `step_threads`: torch
        threads for the decoding steps (default: as for the prompts). `sampling`: draw each token from
        the (constrained) distribution at a temperature instead of taking the argmax, one seeded
        generator per prompt, so a prompt's draw does not depend on the others in its batch (no drafts)."""
        n = len(prompts)
        rows = [constraint.start(text) for text in (prefills or [""] * n)] if constraint is not None else None
        threads = torch.get_num_threads()
        try:
            with torch.inference_mode():
                return self._decode(prompts, limits, stops, constraint, rows, step_threads, sampling, stop_loops)
        finally:
            torch.set_num_threads(threads)

    def _decode(self, prompts: Sequence[Tokens], limits: Sequence[int], stops: set[int],
                constraint: LinePrefixConstraint | None, rows: list | None, step_threads: int | None,
                sampling: Sampling | None = None, stop_loops: bool = False) -> list[list[int]]:
        """Prefill on the current threads, then the token-by-token steps (on `step_threads`)."""
        if self.draft_tokens and sampling is None:
            return self._decode_drafted(prompts, limits, stops, constraint, rows, step_threads, stop_loops)
        draws = sampling.generators() if sampling is not None else None
        n = len(prompts)
        watches = [LoopWatch() for _ in range(n)] if stop_loops else None
        first, cache, mask, lengths = self._prefill(prompts, max(limits))
        if step_threads:
            torch.set_num_threads(step_threads)
        answers: list[list[int]] = [[] for _ in range(n)]
        alive = list(range(n))          # batch row -> prompt index
        logits = first
        while alive:
            token_ids = self._pick(logits, constraint, [rows[i] for i in alive] if rows is not None else None,
                                   None if draws is None else (sampling.temperature, [draws[i] for i in alive]))
            finished = []
            for slot, (i, token) in enumerate(zip(alive, token_ids, strict=True)):
                answers[i].append(token)
                if rows is not None:
                    constraint.advance(rows[i], token)
                looped = watches is not None and watches[i].add(token)
                if token in stops or len(answers[i]) >= limits[i] or looped:
                    finished.append(slot)
            if finished:
                keep, mask, lengths = self._retire(finished, alive, prompts, answers, cache, mask, lengths)
                if not keep:
                    break
                token_ids = [token_ids[slot] for slot in keep]
                alive = [alive[slot] for slot in keep]
            logits = self._step(token_ids, cache, mask, lengths)
            self.forwards += 1
            lengths = lengths + 1
        return answers

    def _decode_drafted(self, prompts: Sequence[Tokens], limits: Sequence[int], stops: set[int],
                        constraint: LinePrefixConstraint | None, rows: list | None, step_threads: int | None,
                        stop_loops: bool = False) -> list[list[int]]:
        """As `_decode`, each step feeding every row's next token plus its draft (`PromptLookup`)."""
        n = len(prompts)
        first, cache, mask, lengths = self._prefill(prompts, max(limits) + self.spare_columns)
        if step_threads:
            torch.set_num_threads(step_threads)
        answers: list[list[int]] = [[] for _ in range(n)]
        lookups = [PromptLookup(ids) for ids in prompts]
        watches = [LoopWatch() for _ in range(n)] if stop_loops else None
        alive = list(range(n))                    # batch row -> prompt index
        drafts: list[list[int]] = [[] for _ in range(n)]
        logits = first[:, None, :]                # [rows, 1 + drafted, vocabulary]
        fed = False                               # logits of the prompts, not of fed tokens
        while True:
            finished, kept = [], []
            for slot, i in enumerate(alive):
                row = rows[i] if rows is not None else None
                taken = self._verify(logits[slot], drafts[slot], constraint, row, limits[i] - len(answers[i]), stops)
                answers[i] += taken
                lookups[i].extend(taken)
                self.drafted += len(drafts[slot])
                self.kept += len(taken) - 1
                looped = watches is not None and watches[i].extend(taken) is not None
                if taken[-1] in stops or len(answers[i]) >= limits[i] or looped:
                    finished.append(slot)
                kept.append(len(taken))
            if fed:   # the fed columns after each row's kept tokens are masked out for good
                width = logits.shape[1]
                start = cache.layers[0].used - width
                for slot, count in enumerate(kept):
                    mask[slot, start + count : start + width] = 0
                lengths = lengths + torch.tensor(kept)
            fed = True
            if finished:
                keep, mask, lengths = self._retire(finished, alive, prompts, answers, cache, mask, lengths)
                if not keep:
                    break
                alive = [alive[slot] for slot in keep]
            most = min(self.draft_tokens, self.draft_budget // len(alive) - 1)
            drafts = [lookups[i].draft(min(most, limits[i] - len(answers[i]) - 1)) for i in alive]
            feed = [[answers[i][-1]] + draft for i, draft in zip(alive, drafts, strict=True)]
            if cache.layers[0].used + max(map(len, feed)) > mask.shape[1]:
                mask = _squeeze(cache, mask)
                self.squeezes += 1
            logits = self._feed(feed, cache, mask, lengths)
            self.forwards += 1
        return answers

    @staticmethod
    def _verify(logits: torch.Tensor, draft: list[int], constraint: LinePrefixConstraint | None, row,
                room: int, stops: set[int]) -> list[int]:
        """The tokens greedy decoding takes from one row's logits [1 + len(draft), vocabulary]: the
        argmax at each position, while the token before it was the drafted one; at most `room`,
        and none after a stop token. Advances the row's constraint state."""
        if constraint is None:
            best = logits.argmax(dim=-1).tolist()
        taken: list[int] = []
        for at in range(len(draft) + 1):
            if constraint is not None:
                allowed = constraint.allowed(row)
                if not allowed.any():
                    allowed = constraint.stops
                token = int(logits[at].masked_fill(~allowed.to(logits.device), float("-inf")).argmax())
                constraint.advance(row, token)
            else:
                token = best[at]
            taken.append(token)
            if token in stops or len(taken) >= room or at == len(draft) or token != draft[at]:
                break
        return taken

    # -- internals ------------------------------------------------------------------------------

    @staticmethod
    def _pick(logits: torch.Tensor, constraint: LinePrefixConstraint | None, rows: list | None,
              draws: tuple[float, list[torch.Generator]] | None = None) -> list[int]:
        """Argmax of the (constrained) scores, as `generate` takes it after its logits processors; with
        `draws` (temperature, one generator per row) a token drawn from each row's softmax at that temperature."""
        if constraint is not None and rows is not None:
            allowed = torch.stack([constraint.allowed(row) for row in rows])
            allowed[~allowed.any(dim=1)] = constraint.stops
            logits = logits.masked_fill(~allowed.to(logits.device), float("-inf"))
        if draws is None:
            return logits.argmax(dim=-1).tolist()
        temperature, generators = draws
        probs = torch.softmax(logits.float().cpu() / temperature, dim=-1)
        return [int(torch.multinomial(p, 1, generator=g)) for p, g in zip(probs, generators, strict=True)]

    def _retire(self, finished: list[int], alive: list[int], prompts: Sequence[Tokens], answers: list[list[int]],
                cache: Cache, mask: torch.Tensor, lengths: torch.Tensor,
                ) -> tuple[list[int], torch.Tensor, torch.Tensor]:
        """Remember the `finished` rows and drop them from the batch: the slots that stay (none when every
        row is done; the cache is then left as it is), and their rows of `mask` and `lengths`."""
        self._remember(finished, alive, prompts, answers, cache, mask)
        keep = [slot for slot in range(len(alive)) if slot not in finished]
        if keep:
            mask, lengths = self._keep_rows(keep, cache, mask, lengths)
        return keep, mask, lengths

    def _remember(self, finished: list[int], alive: list[int], prompts: Sequence[Tokens], answers: list[list[int]],
                  cache: Cache, mask: torch.Tensor) -> None:
        """Keep the KV of the finished rows (`keep_finished`): the cache holds each row's prompt and its
        answer but the last token (picked, never fed), in the columns its mask marks."""
        store = finished_sequences(self.model)
        if store is None:
            return
        used = cache.layers[0].used
        shared = _shared(cache)
        for slot in finished:
            columns = mask[slot, :used].nonzero().flatten().to(self.device)
            kv = [(layer.keys[slot : slot + 1, :, columns], layer.values[slot : slot + 1, :, columns])
                  for layer in cache.layers]
            head = shared.of_row[slot] if shared is not None else None
            if head is not None:    # the row's head first, then its own columns
                kv = [(torch.cat([hk, k], dim=2), torch.cat([hv, v], dim=2))
                      for (hk, hv), (k, v) in zip(shared.heads[head], kv, strict=True)]
            ids = [*prompts[alive[slot]], *answers[alive[slot]]][: kv[0][0].shape[2]]
            store.add(ids, kv)

    def _keep_rows(self, keep: list[int], cache: Cache, mask: torch.Tensor, lengths: torch.Tensor,
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """Drop the finished rows from the cache; the rows of `mask` and `lengths` that stay."""
        index = torch.tensor(keep, device=self.device)
        for layer in cache.layers:
            layer.keep(index)
        if _shared(cache) is not None:
            cache.shared_heads = cache.shared_heads.keep(keep)
        return mask.index_select(0, index.cpu()), lengths.index_select(0, index.cpu())

    def _step(self, token_ids: list[int], cache: Cache, mask: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        used = cache.layers[0].used
        mask[:, used] = 1
        with shared_heads.reading(_shared(cache)):
            out = self.model(
                input_ids=torch.tensor(token_ids, device=self.device)[:, None],
                attention_mask=mask[:, : used + 1].to(self.device),
                position_ids=lengths[:, None].to(self.device),
                past_key_values=cache,
                use_cache=True,
            )
        return out.logits[:, -1, :].float()

    def _feed(self, feed: list[list[int]], cache: Cache, mask: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Logits [rows, width, vocabulary] of each row's tokens `feed[r]`, written at the next
        `width` columns of the cache; a shorter row's extra columns are masked out."""
        used, width = cache.layers[0].used, max(map(len, feed))
        ids = torch.zeros((len(feed), width), dtype=torch.long)
        for slot, tokens in enumerate(feed):
            ids[slot, : len(tokens)] = torch.tensor(tokens)
            mask[slot, used : used + len(tokens)] = 1
            mask[slot, used + len(tokens) : used + width] = 0
        with _kv_heads_in_sdpa(width > 1), shared_heads.reading(_shared(cache)):
            out = self.model(
                input_ids=ids.to(self.device),
                attention_mask=mask[:, : used + width].to(self.device),
                position_ids=(lengths[:, None] + torch.arange(width)).to(self.device),
                past_key_values=cache,
                use_cache=True,
            )
        return out.logits.float()

    def _prefill(self, prompts: Sequence[Tokens], new_tokens: int
                 ) -> tuple[torch.Tensor, Cache, torch.Tensor, torch.Tensor]:
        """Last-position logits of every prompt and the left-padded KV buffer holding them (with
        `share_heads`, the buffer holds what follows each prompt's head, and the cache its heads:
        `shared_heads.SharedHeads`, read by the steps)."""
        heads = self._shared_heads(prompts)
        starts = [head_len if self.share_heads else 0 for head_len, _ in heads]
        width = max(len(ids) - start for ids, start in zip(prompts, starts, strict=True))
        n = len(prompts)
        buffers: list[tuple[torch.Tensor, torch.Tensor]] = []
        mask = torch.zeros((n, width + new_tokens), dtype=torch.long)
        logits = []
        computed: dict[tuple[int, Tokens], int] = {}     # (head length, prompt) -> the row that ran it
        for i, ids in enumerate(prompts):
            head_len, head = heads[i]
            own = len(ids) - starts[i]
            twin = computed.setdefault((head_len, tuple(ids)), i)
            if twin != i:   # the same prompt on the same head (a sampled question's other draws): its KV copied
                logits.append(logits[twin])
                for keys, values in buffers:
                    keys[i, :, width - own : width] = keys[twin, :, width - own : width]
                    values[i, :, width - own : width] = values[twin, :, width - own : width]
                mask[i, width - own : width] = 1
                continue
            self.prefilled += 1
            cache = DynamicCache([(k, v) for k, v in head]) if head else None
            out = self.model(input_ids=torch.tensor([ids[head_len:]], device=self.device),
                             past_key_values=cache, use_cache=True, logits_to_keep=1)
            logits.append(out.logits[0, -1, :].float())
            for layer, state in enumerate(out.past_key_values.layers):
                if not buffers or len(buffers) <= layer:
                    shape = (n, state.keys.shape[1], width + new_tokens, state.keys.shape[3])
                    buffers.append((state.keys.new_zeros(shape), state.values.new_zeros(shape)))
                keys, values = buffers[layer]
                keys[i, :, width - own : width] = state.keys[0, :, starts[i]:]
                values[i, :, width - own : width] = state.values[0, :, starts[i]:]
            mask[i, width - own : width] = 1
        cache = Cache(layers=[SlotLayer(k, v, width) for k, v in buffers])
        if self.share_heads:
            distinct: dict[int, int] = {}
            kept: list[KV] = []
            for start, (_, head) in zip(starts, heads, strict=True):
                if start and id(head) not in distinct:
                    distinct[id(head)] = len(kept)
                    kept.append(head)
            cache.shared_heads = shared_heads.SharedHeads(
                kept, [distinct[id(head)] if start else None for start, (_, head) in zip(starts, heads, strict=True)])
        lengths = torch.tensor([len(ids) for ids in prompts], dtype=torch.long)
        return torch.stack(logits), cache, mask, lengths

    def _shared_heads(self, prompts: Sequence[Tokens]) -> list[tuple[int, KV]]:
        """Per prompt, (length, KV) of the prefix it starts from: the prefix its cluster shares
        (`prompt_clusters`: e.g. a judge's prompts quoting one paper's synopsis and reviews before
        each candidate), else the longest kept head of an earlier call that starts it, else the
        prefix the whole call shares. A shared prefix is computed once and kept for later calls."""
        from tasks.lm.loglikelihood import prompt_clusters

        call = min(common_prefix(prompts), min(map(len, prompts)) - 1)
        found: dict[Tokens, tuple[int, KV]] = {}
        if len(prompts) > 1:
            for cluster in prompt_clusters([tuple(ids) for ids in prompts]):
                length = min(common_prefix(cluster), min(map(len, cluster)) - 1)
                if len(cluster) > 1 and length > call:
                    kv = self._head(cluster[0][:length], keep=True)
                    found.update({ids: (length, kv) for ids in cluster})
        plan = []
        floor = call if len(prompts) > 1 else 0   # a lone prompt's "shared" prefix is all of it
        for ids in map(tuple, prompts):
            if ids not in found:
                kept = max((h for h in self._heads if floor < len(h) < len(ids) and ids[: len(h)] == h),
                           key=len, default=None)
                found[ids] = ((len(kept), self._head(kept, keep=True)) if kept is not None
                              else (call, self._head(ids[:call], keep=len(prompts) > 1)))
            plan.append(found[ids])
        return plan

    def _head(self, head: Tokens, keep: bool) -> KV:
        """KV (batch 1) of the prefix every prompt of the call shares; kept for the next calls when
        several prompts share it (a lone prompt's head is most of that prompt: not worth keeping)."""
        if not head:
            return []
        if head in self._heads:
            self._heads.move_to_end(head)
            return self._heads[head]
        out = self.model.base_model(input_ids=torch.tensor([head], device=self.device), use_cache=True)
        kv = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
        if not keep:
            return kv
        self._heads[head] = kv
        while len(self._heads) > self.heads_kept:
            self._heads.popitem(last=False)
        return kv


@contextlib.contextmanager
def _kv_heads_in_sdpa(on: bool) -> Iterator[None]:
    """Attention of several query tokens on the KV heads as they are (SDPA's `enable_gqa`), for this
    thread's forward passes only: without it a masked multi-token pass first copies every layer's
    KV once per query head sharing it (`repeat_kv`), which made a step of 8 rows x 2 tokens 4x
    slower than 8 x 1 on the CPU. Same numbers to the bit for more than one query token (measured);
    one-token steps keep transformers' own path (`pack_gqa`), which differs in the last bits.

    transformers decides this in `use_gqa_in_sdpa`, switched on for the whole process by an
    environment variable; two decoders in two threads (candidates generating side by side) toggling
    it left it on for every later pass, and one thread's one-token step took the other's path. So the
    decision is wrapped once to read a per-thread flag (`_GQA`)."""
    if not on or not _per_thread_gqa():
        yield
        return
    with shared_heads.thread_setting(_GQA, "on", True):
        yield


_GQA = threading.local()


@functools.cache
def _per_thread_gqa() -> bool:
    """Wrap transformers' `use_gqa_in_sdpa` so that it says yes where this thread's `_GQA.on` is set
    (False where this transformers has no such function: the passes then copy the KV heads, slower)."""
    from transformers.integrations import sdpa_attention

    decide = getattr(sdpa_attention, "use_gqa_in_sdpa", None)
    if decide is None:
        return False

    def per_thread(attention_mask, key, value, *args, **kwargs):
        return bool(getattr(_GQA, "on", False)) or decide(attention_mask, key, value, *args, **kwargs)

    sdpa_attention.use_gqa_in_sdpa = per_thread
    return True


def _shared(cache: Cache) -> shared_heads.SharedHeads | None:
    """The heads the cache's rows start from, kept apart from its buffer (`GreedyDecoder.share_heads`)."""
    return getattr(cache, "shared_heads", None)


def _squeeze(cache: Cache, mask: torch.Tensor) -> torch.Tensor:
    """Drop the masked-out columns of every row (left padding again); the new mask."""
    counts = mask.sum(dim=1)
    width = int(counts.max())
    columns = torch.zeros((mask.shape[0], width), dtype=torch.long)
    squeezed = torch.zeros_like(mask)
    for slot in range(mask.shape[0]):
        kept = mask[slot].nonzero().flatten()
        columns[slot, width - len(kept) :] = kept
        squeezed[slot, width - len(kept) : width] = 1
    for layer in cache.layers:
        layer.gather(columns)
    return squeezed


