"""Block-sparse attention for the engine's flat batches: torch's flex attention on a GPU, query blocks on a CPU.

A flat batch (tasks/lm/loglikelihood.py) is one sequence: the call's shared head, then every packed
row one after the other, each row its prompts laid out as a prefix tree in depth-first order with
every continuation after its prompt. Who may attend to whom is one rule over one tag per token
(`may_attend`), not a dense matrix: a token sees every earlier token whose subtree it lies in, and a
token's subtree is a stretch of the layout that ends where the tag says. With flex attention the GPU
skips every 128 x 128 block the rule leaves empty, so attention costs what the rows need, no padding
is computed between rows, and the head is computed once per batch instead of its KV being copied
into every row.

On a CPU (no flex attention without compiling) the same rule is applied block by block: the batch's
dense mask carries a plan (`block_plan`) that lists, for each run of `QUERY_BLOCK` queries, the keys
any of them may see, and attention runs once per run on those keys only. SDPA's CPU kernel computes
every pair of a masked call, so without the plan a flat batch would pay for the whole square; with it
attention costs what the rows need (the empty squares between rows, the branches and continuations
that never see each other and the causal upper half are skipped), at about the same price per pair in float32 and
bfloat16.

The decoder keeps SDPA for everything else (generation, any mask without a plan):
`use_flat_attention(model)` registers an attention function that sends a flex `BlockMask` to flex
attention, a mask with a plan to the blockwise loop and any other mask to transformers' SDPA
function, and the mask function SDPA uses, under one name.
Only torch and transformers are imported, so the engine still runs on a bare GPU machine.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

NAME = "grebench_flat"
QUERY_BLOCK = 128   # queries per blockwise attention call on a CPU
PLAN = "_grebench_blocks"   # the attribute of a dense mask that holds its block plan

Block = tuple[int, int, "torch.Tensor | slice", "torch.Tensor | None"]   # queries [start, end), keys, mask


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

    plan = getattr(attention_mask, PLAN, None)
    if plan is not None:
        return _blockwise(query, key, value, plan, scaling), None
    if not isinstance(attention_mask, BlockMask):
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
    from torch.nn.attention.flex_attention import flex_attention

    # inside a compiled layer (compile_layers) flex attention is traced with the rest of it
    flex = flex_attention if torch.compiler.is_compiling() else _compiled_flex()
    out = flex(query, key, value, block_mask=attention_mask, scale=scaling, enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2).contiguous(), None


def _blockwise(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, plan: list[Block],
               scaling: float | None) -> torch.Tensor:
    """Attention of a flat batch (batch 1, heads first) one run of queries at a time, each on the keys
    its plan names; in transformers' layout (batch, length, heads, dim)."""
    from torch.nn.functional import scaled_dot_product_attention

    out = torch.empty_like(query)
    gqa = query.shape[1] != key.shape[1]
    for start, end, keys, mask in plan:
        out[:, :, start:end] = scaled_dot_product_attention(
            query[:, :, start:end], key[:, :, keys], value[:, :, keys], attn_mask=mask, scale=scaling, enable_gqa=gqa)
    return out.transpose(1, 2).contiguous()


def block_plan(allowed: torch.Tensor, size: int = QUERY_BLOCK) -> list[Block]:
    """For each run of `size` queries of a dense (L, L) mask: (start, end, the keys any of them may see,
    the mask over those keys). Keys in one stretch are a slice (no gather)."""
    plan: list[Block] = []
    for start in range(0, allowed.shape[0], size):
        rows = allowed[start : start + size]
        cols = rows.any(0).nonzero().squeeze(1)
        first, last = int(cols[0]), int(cols[-1])
        keys = slice(first, last + 1) if last - first + 1 == cols.numel() else cols
        plan.append((start, start + rows.shape[0], keys, rows[:, keys]))
    return plan


def use_flat_attention(model: PreTrainedModel) -> str | None:
    """Switch an SDPA model to the dispatching attention: "flex" on a GPU with flex attention, "blocks" on a
    CPU; None where it cannot be (another attention implementation, a GPU without flex attention): the
    engine then packs rows instead."""
    current = getattr(model.config, "_attn_implementation", None)
    if current not in ("sdpa", NAME) or not available():
        return None
    kind = "flex" if model.device.type == "cuda" else "blocks" if model.device.type == "cpu" else None
    if kind is None:
        return None
    if current != NAME:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

        AttentionInterface.register(NAME, _attention)
        AttentionMaskInterface.register(NAME, sdpa_mask)
        model.set_attn_implementation(NAME)
    return kind


def compile_layers(model: PreTrainedModel, compiled: bool = True) -> None:
    """Compile each decoder layer in place (one graph for all of them, any sequence length), or undo it:
    the norms, rotary embedding and gated activation fuse into a few kernels around the matmuls and
    flex attention (64% of an H200's bf16 peak against 55% eager, docs/engines.md). Only where flex
    attention runs: the CPU's blockwise plan is Python data, and inductor's CPU flex kernel does not
    build with torch 2.13."""
    for layer in model.base_model.layers:
        if compiled:
            layer.compile(dynamic=True)
        else:
            layer._compiled_call_impl = None   # what nn.Module.compile sets: the eager call again


def flat_mask(end: torch.Tensor, sparsity: str | None, past: int = 0):
    """The mask of a flat batch of len(end) tokens (`may_attend`'s tags) after `past` head tokens held
    in a KV cache (every token sees them): a flex BlockMask ("flex"), a dense (1, 1, L, past + L) one
    carrying its block plan ("blocks"), or a plain dense one (None)."""
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
    if sparsity == "blocks":
        setattr(mask, PLAN, block_plan(allowed))
    return mask
