"""Block-sparse attention for the engine's flat batches on a GPU (torch's flex attention).

A flat batch (tasks/lm/loglikelihood.py) is one sequence: the call's shared head, then every packed
row one after the other, each row holding prompts and the continuations after them. Who may attend
to whom is a rule over three tags per token (`may_attend`), not a dense matrix: with flex attention
the GPU skips every 128 x 128 block the rule leaves empty, so attention costs what the rows need,
no padding is computed between rows, and the head is computed once per batch instead of its KV
being copied into every row.

The decoder keeps SDPA for everything else (generation, the CPU): `use_flat_attention(model)`
registers an attention function that sends a flex `BlockMask` to flex attention and any other mask
to transformers' SDPA function, and the mask function SDPA uses, under one name.
Only torch and transformers are imported, so the engine still runs on a bare GPU machine.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

NAME = "grebench_flat"
HEAD = -1        # the row tag of the call's head: every token may attend to it


def may_attend(row: torch.Tensor, prompt: torch.Tensor, cont: torch.Tensor,
               q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    """Whether query position q may attend to key position kv (broadcasting index tensors).

    Tags per token: `row` (HEAD for the head), `prompt` (-1 for the part a row's prompts share, else
    the prompt's index in its row), `cont` (-1 for prompt tokens, else the continuation's index in its
    row). A token sees the head, the shared part of its row, its own prompt's suffix and its own
    continuation, never a later token."""
    visible = (prompt[kv] < 0) | ((prompt[kv] == prompt[q]) & ((cont[kv] < 0) | (cont[kv] == cont[q])))
    return (kv <= q) & ((row[kv] == HEAD) | ((row[kv] == row[q]) & visible))


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

    if not isinstance(attention_mask, BlockMask):
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
    out = _compiled_flex()(query, key, value, block_mask=attention_mask, scale=scaling,
                           enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2).contiguous(), None


def use_flat_attention(model: PreTrainedModel) -> bool:
    """Switch an SDPA model on a GPU to the dispatching attention; False where it cannot be (CPU, another
    attention implementation, a torch without flex attention): the engine then packs rows instead."""
    current = getattr(model.config, "_attn_implementation", None)
    if model.device.type != "cuda" or current not in ("sdpa", NAME) or not available():
        return False
    if current != NAME:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

        AttentionInterface.register(NAME, _attention)
        AttentionMaskInterface.register(NAME, sdpa_mask)
        model.set_attn_implementation(NAME)
    return True


def flat_mask(row: torch.Tensor, prompt: torch.Tensor, cont: torch.Tensor, block: bool):
    """The mask of a flat batch of len(row) tokens: a flex BlockMask (`block`) or a dense (1, 1, L, L) one."""
    length = row.shape[0]
    if block:
        from torch.nn.attention.flex_attention import create_block_mask

        def rule(b, h, q, kv):
            return may_attend(row, prompt, cont, q, kv)

        # compiled: the rule is evaluated block by block, never as a dense L x L tensor
        return create_block_mask(rule, None, None, length, length, device=row.device, _compile=True)
    index = torch.arange(length, device=row.device)
    return may_attend(row, prompt, cont, index[:, None], index[None, :])[None, None]
