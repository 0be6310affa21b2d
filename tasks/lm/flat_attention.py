"""Block-sparse attention for the engine's flat batches: torch's flex attention on a GPU, segments by path on a CPU.

A flat batch (tasks/lm/loglikelihood.py) is one sequence: the call's shared head, then every packed
row one after the other, each row its prompts laid out as a prefix tree in depth-first order with
every continuation after its prompt. Who may attend to whom is one rule over one tag per token
(`may_attend`), not a dense matrix: a token sees every earlier token whose subtree it lies in, and a
token's subtree is a stretch of the layout that ends where the tag says. With flex attention the GPU
skips every 128 x 128 block the rule leaves empty, so attention costs what the rows need, no padding
is computed between rows, and the head is computed once per batch instead of its KV being copied
into every row.

On a CPU (no flex attention without compiling) the same rule is applied segment by segment: a
segment is a stretch of tokens where each sees the one before it, so all of its tokens share one path
(the head, then every ancestor). The batch's dense mask carries a plan (`path_plan`) that gathers each
segment's path keys, in path order, and attention runs on exactly those keys (plus fewer than
`KEY_STEP` masked ones per query), pieces of one padded shape together in one SDPA call. The shape of
a query's call depends only on how many keys that query sees, and SDPA's CPU kernel computes a row
the same way in calls of the same shape, so a token's attention is the same to the bit whatever else
is in the batch. The linear layers' products do not depend on the other rows either: a request scores
the same alone and inside any batch, in bfloat16 as in float32 (in bfloat16, float32 sums added in
another order used to flip a rounding and move a request's value by up to half a nat).

A decoding step whose rows read shared prompt heads goes to tasks/lm/shared_heads.py, and SDPA does
everything else (generation's prompts, any mask without a plan):
`use_flat_attention(model)` registers an attention function that sends a flex `BlockMask` to flex
attention, a mask with a plan to the segment loop and any other mask to transformers' SDPA
function, and the mask function SDPA uses, under one name.
Only torch and transformers are imported, so the engine still runs on a bare GPU machine.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from tasks.lm import cpu_kernels, shared_heads

if TYPE_CHECKING:
    from transformers import PreTrainedModel

NAME = "grebench_flat"
KEY_STEP = 64        # a call's keys are padded to a multiple of this (see `path_plan`)
QUERY_SPLIT = 32      # SDPA's CPU kernel splits a call's query rows in blocks of a multiple of this,
                      # and multiplies a last block of 1 to 3 rows by another product
PLAN = "_grebench_paths"   # the attribute of a dense mask that holds its plan


def may_attend(end: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    """Whether query position q may attend to key position kv (broadcasting index tensors).

    `end` per token: the position where the stretch of the layout that descends from it ends
    (exclusive). In a depth-first layout of prompts as a prefix tree, a token's descendants are the
    tokens laid out after it up to there: for a prompt token, the rest of every prompt sharing it and
    their continuations; for a continuation token, the rest of its continuation; for the call's head,
    everything; for padding, itself. So a token sees exactly its ancestors and itself."""
    return (kv <= q) & (q < end[kv])


def available() -> bool:
    try:
        from torch.nn.attention.flex_attention import flex_attention  # noqa: F401
        from transformers import AttentionInterface  # noqa: F401
        from transformers.masking_utils import AttentionMaskInterface  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention)


def _attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    from torch.nn.attention.flex_attention import BlockMask
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    shared = shared_heads.active()
    if shared is not None:     # a decoding step reading its rows' shared heads (tasks/lm/shared_heads.py)
        return shared_heads.attention(module, query, key, value, attention_mask, scaling, shared), None
    plan = getattr(attention_mask, PLAN, None)
    if plan is not None:
        return _by_path(query, key, value, plan, scaling), None
    if not isinstance(attention_mask, BlockMask):
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
    from torch.nn.attention.flex_attention import flex_attention

    # inside a compiled layer (compile_layers) flex attention is traced with the rest of it
    flex = flex_attention if torch.compiler.is_compiling() else _compiled_flex()
    out = flex(query, key, value, block_mask=attention_mask, scale=scaling, enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2).contiguous(), None


@dataclass(frozen=True)
class Group:
    """Segments of one padded shape, attended to in one SDPA call (one batch element each).

    `queries` (G * n) and `keys` (G * width): positions in the sequence and in [past | sequence], each
    segment's queries padded by repeating its last one, its keys padded with key 0 under a False mask;
    `mask` (G, 1, n, width); `rows`: where the real queries sit among the G * n, `targets`: their
    positions in the sequence."""

    queries: torch.Tensor
    keys: torch.Tensor
    mask: torch.Tensor
    rows: torch.Tensor
    targets: torch.Tensor


def _ceil(n: int, quantum: int) -> int:
    return -(-n // quantum) * quantum


def query_rows(n: int, fold: int) -> int:
    """The queries of a piece of `n`, padded so that its `fold` query heads per KV head, stacked as one
    head's rows, leave no last block of 1 to 3 rows."""
    while fold * n < 4 or fold * n % QUERY_SPLIT in (1, 2, 3):
        n += 1
    return n


def segments(allowed: torch.Tensor, past: int) -> list[tuple[int, int, torch.Tensor]]:
    """The segments of a dense (L, past + L) mask, stretches of tokens where each sees the one before it (so
    they share every other key): (start, end, path), the path being every key its last token sees, in
    order: the head, the ancestors, then the segment itself."""
    own = allowed[:, past:]
    breaks = (~own.diagonal(-1)).nonzero().squeeze(1) + 1
    starts = [0, *breaks.tolist()]
    ends = [*starts[1:], allowed.shape[0]]
    return [(start, end, allowed[end - 1].nonzero().squeeze(1)) for start, end in zip(starts, ends, strict=True)]


@dataclass
class Paths:
    """The plan of a flat batch's dense mask: its segments, laid out for the bf16 kernel
    (tasks/lm/cpu_kernels.py) or cut into SDPA's groups (`path_plan`), whichever runs."""

    allowed: torch.Tensor
    past: int
    fold: int

    @functools.cached_property
    def segments(self) -> list[tuple[int, int, torch.Tensor]]:
        return segments(self.allowed, self.past)

    @functools.cached_property
    def groups(self) -> list[Group]:
        return path_plan(self.allowed, self.past, self.fold, self.segments)

    @functools.cached_property
    def table(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(S, 5) int32 rows of (start, length, offset, count, shared) and the paths' keys one after the
        other; `shared`: how many leading keys the path has in common with the previous segment's (the
        kernel keeps their packed blocks: a continuation after its prompt, or after a sibling, packs
        only its own keys)."""
        rows, before = [], None
        offset = 0
        for start, end, path in self.segments:
            shared = 0 if before is None else _common(before, path)
            rows.append((start, end - start, offset, len(path), shared))
            offset += len(path)
            before = path
        keys = torch.cat([path for _, _, path in self.segments]).to(torch.int32)
        return torch.tensor(rows, dtype=torch.int32).reshape(-1, 5), keys


def _common(a: torch.Tensor, b: torch.Tensor) -> int:
    """How many leading entries `a` and `b` share."""
    n = min(len(a), len(b))
    differ = (a[:n] != b[:n]).nonzero()
    return int(differ[0, 0]) if len(differ) else n


def path_plan(allowed: torch.Tensor, past: int, fold: int = 1,
              cut: list[tuple[int, int, torch.Tensor]] | None = None) -> list[Group]:
    """SDPA's plan of a dense (L, past + L) mask: its segments (`segments`, or `cut` where already known),
    cut into pieces whose queries see the same number of keys once rounded up to a multiple of `KEY_STEP`,
    the pieces grouped by padded shape.

    SDPA's CPU kernel walks the keys in blocks of 512 and treats the last, partial block with other
    code (a scalar tail, other packing), so a query's result depends on how many keys its call has,
    not only on the keys it sees. Here that number is a function of the query's own key count alone
    (rounded up to the step), whatever the batch; a query pays for fewer than `KEY_STEP` masked keys.
    `fold`: query heads per KV head, which `_by_path` stacks as rows of their KV head's call."""
    shapes: dict[tuple[int, int], list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]] = {}
    for start, end, path in segments(allowed, past) if cut is None else cut:
        ancestors = len(path) - (end - start)
        first = start
        while first < end:
            width = _ceil(ancestors + first - start + 1, KEY_STEP)     # the first query's keys, rounded up
            last = min(end, start + width - ancestors)                  # the queries whose keys round to as many
            n = query_rows(last - first, fold)
            queries = torch.arange(first, first + n).clamp(max=last - 1)
            keys = path[: ancestors + last - start]
            mask = allowed.new_zeros((n, width))
            mask[:, : len(keys)] = allowed[queries][:, keys]
            keys = torch.cat([keys, keys.new_zeros(width - len(keys))])
            shapes.setdefault((n, width), []).append((queries, keys, mask, torch.arange(first, last)))
            first = last
    plan = []
    for (n, _), members in shapes.items():
        queries, keys, masks, targets = zip(*members, strict=True)
        rows = torch.cat([torch.arange(i * n, i * n + len(t)) for i, t in enumerate(targets)])
        plan.append(Group(torch.cat(queries), torch.cat(keys), torch.stack(masks)[:, None], rows, torch.cat(targets)))
    return plan


def _gather(states: torch.Tensor, index: torch.Tensor, count: int) -> torch.Tensor:
    """(1, heads, L, dim) states at `index` (count * n positions) as (count, heads, n, dim)."""
    return states[0].index_select(1, index).unflatten(1, (count, -1)).transpose(0, 1)


def _by_path(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, plan: Paths,
             scaling: float | None) -> torch.Tensor:
    """Attention of a flat batch (batch 1, heads first), each segment on its path's keys in path order; in
    transformers' layout (batch, length, heads, dim). In bfloat16 on a CPU with bf16 units, the kernel of
    tasks/lm/cpu_kernels.py (one call for the batch); anywhere else SDPA one group of pieces at a time,
    the query heads that share a KV head stacked as rows of one head (fewer, fuller query blocks, and no
    copy of the KV per query head)."""
    from torch.nn.functional import scaled_dot_product_attention

    heads, kv_heads, dim = query.shape[1], key.shape[1], query.shape[3]
    scale = dim ** -0.5 if scaling is None else scaling
    attend = cpu_kernels.kernel() if query.dtype == torch.bfloat16 and cpu_kernels.takes(dim) else None
    if attend is not None:
        return attend(query, key, value, *plan.table, scale)
    out = torch.empty_like(query[0])
    fold = heads // kv_heads
    for group in plan.groups:
        count, n = group.mask.shape[0], group.mask.shape[2]
        queries = _gather(query, group.queries, count).unflatten(1, (kv_heads, fold)).flatten(2, 3)
        got = scaled_dot_product_attention(
            queries, _gather(key, group.keys, count), _gather(value, group.keys, count),
            attn_mask=group.mask.repeat(1, 1, fold, 1), scale=scale)
        got = got.unflatten(2, (fold, n)).flatten(1, 2)          # (count, heads, n, dim)
        out.index_copy_(1, group.targets, got.transpose(0, 1).flatten(1, 2).index_select(1, group.rows))
    return out.transpose(0, 1)[None].contiguous()


def use_flat_attention(model: PreTrainedModel) -> str | None:
    """Switch an SDPA model to the dispatching attention: "flex" on a GPU with flex attention, "paths" on a
    CPU; None where it cannot be (another attention implementation, a GPU without flex attention): the
    engine then packs rows instead."""
    kind = "flex" if model.device.type == "cuda" else "paths" if model.device.type == "cpu" else None
    if kind is None or not available() or not use_dispatching_attention(model):
        return None
    return kind


def use_dispatching_attention(model: PreTrainedModel) -> bool:
    """Give an SDPA model the dispatching attention function (`_attention`: SDPA for any mask it has no
    other way for, so the model computes what it did); False where the model attends some other way."""
    current = getattr(model.config, "_attn_implementation", None)
    if current not in ("sdpa", NAME):
        return False
    if current != NAME:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

        AttentionInterface.register(NAME, _attention)
        AttentionMaskInterface.register(NAME, sdpa_mask)
        model.set_attn_implementation(NAME)
    return True


def compile_layers(model: PreTrainedModel, compiled: bool = True) -> None:
    """Compile each decoder layer in place (one graph for all of them, any sequence length), or undo it:
    the norms, rotary embedding and gated activation fuse into a few kernels around the matmuls and
    flex attention (64% of an H200's bf16 peak against 55% eager, docs/engines.md). Only where flex
    attention runs: the CPU's plan by path is Python data, and inductor's CPU flex kernel does not
    build with torch 2.13."""
    for layer in model.base_model.layers:
        if compiled:
            layer.compile(dynamic=True)
        else:
            layer._compiled_call_impl = None   # what nn.Module.compile sets: the eager call again


def flat_mask(end: torch.Tensor, sparsity: str | None, past: int = 0, fold: int = 1):
    """The mask of a flat batch of len(end) tokens (`may_attend`'s tags) after `past` head tokens held
    in a KV cache (every token sees them): a flex BlockMask ("flex"), a dense (1, 1, L, past + L) one
    carrying its plan by path ("paths"), or a plain dense one (None). `fold`: the model's query heads per
    KV head (the plan pads each piece's queries for it)."""
    length = end.shape[0]
    if sparsity == "flex":
        from torch.nn.attention.flex_attention import create_block_mask

        if past:
            raise ValueError("a flex mask holds its head in the sequence, not in a cache")

        def rule(b, h, q, kv):
            return may_attend(end, q, kv)

        # compiled: the rule is evaluated block by block, never as a dense L x L tensor
        return create_block_mask(rule, None, None, length, length, device=end.device, _compile=True)
    index = torch.arange(length, device=end.device)
    allowed = may_attend(end, index[:, None], index[None, :])
    if past:
        allowed = torch.cat([allowed.new_ones((length, past)), allowed], dim=1)
    mask = allowed[None, None]
    if sparsity == "paths":
        setattr(mask, PLAN, Paths(allowed, past, fold))
    return mask
