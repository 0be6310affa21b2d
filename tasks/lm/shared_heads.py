"""Attention of a decoding step on a prompt head that several rows share, read once for all of them.

A judge's prompts quote one paper's synopsis and reviews before each candidate; an oracle's draws
repeat one prompt. The decoder (tasks/lm/decode.py) computes such a shared head once, and each
decoding step then attends to it from every row. Copied into every row's KV buffer, the head is read
once per row per step: at 1,300 tokens of context, 8 rows of SmolLM2-135M read 480 MB of float32
KV per step, and the step is bound by that reading (about 10 GB/s on one core), not by the weights.

Here the head stays where it is (one copy per head, batch 1) and each row's buffer holds only what
follows it. A step's attention is split in two and merged exactly, as cascade (shared-prefix)
inference does:

    on the head:   every query row of the rows sharing it, stacked as one matrix per KV head,
                   times the head's keys: one product that reads the head once;
    on the buffer: each row's own columns, under its mask (left padding, rejected drafts);

each part keeps its softmax's maximum and sum, and the two weighted sums are added with the
weights the joint softmax gives them (the log-sum-exp merge). The result is the attention over the
concatenated keys up to the order of float additions (tests/lm/test_shared_heads.py).

Only float32 (or float64) KV without a sliding window or a logit cap takes this path (`can_share`): the CPU's
float32 and int8 models, where each part's products accumulate in float32 like SDPA's. Any other
model keeps its head copied into every row.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

KV = list[tuple[torch.Tensor, torch.Tensor]]


@dataclass
class SharedHeads:
    """The heads a batch's rows start from: `heads[k]` per layer (keys, values) [1, kv heads, length, dim],
    and per batch row the index of its head (None: the row's buffer holds its whole prompt)."""

    heads: list[KV]
    of_row: list[int | None]
    _groups: list[tuple[int, torch.Tensor]] | None = field(default=None, repr=False)

    def keep(self, slots: Sequence[int]) -> SharedHeads:
        """The rows `slots` go on (finished rows leave the batch)."""
        return SharedHeads(self.heads, [self.of_row[s] for s in slots])

    def groups(self) -> list[tuple[int, torch.Tensor]]:
        """(head, the batch rows reading it) for every head some row reads."""
        if self._groups is None:
            rows: dict[int, list[int]] = {}
            for row, head in enumerate(self.of_row):
                if head is not None:
                    rows.setdefault(head, []).append(row)
            self._groups = [(head, torch.tensor(found)) for head, found in rows.items()]
        return self._groups


_ACTIVE = threading.local()


@contextlib.contextmanager
def thread_setting(local: threading.local, name: str, value: object) -> Iterator[None]:
    """`local.<name>` is `value` in this thread for the section, and what it was after it."""
    before = getattr(local, name, None)
    setattr(local, name, value)
    try:
        yield
    finally:
        setattr(local, name, before)


def reading(shared: SharedHeads | None) -> contextlib.AbstractContextManager[None]:
    """This thread's forward passes attend to `shared`'s heads before each row's own KV."""
    return thread_setting(_ACTIVE, "shared", shared)


def active() -> SharedHeads | None:
    return getattr(_ACTIVE, "shared", None)


def can_share(model: PreTrainedModel) -> bool:
    """Whether `model`'s decoding steps may read shared heads: float32 (or float64), no sliding window and no
    logit cap. An int8 model counts as float32: its activations and KV are (tasks/lm/loading.py
    `quantize_int8`). The model must also take the dispatching attention function that sends its steps
    here (tasks/lm/flat_attention.py `use_dispatching_attention`: an SDPA model)."""
    config = model.config
    wide = next(model.parameters()).dtype in (torch.float32, torch.float64)
    return wide and not any(
        getattr(config, name, None) for name in ("sliding_window", "attn_logit_softcapping", "use_sliding_window"))


def attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              mask: torch.Tensor | None, scaling: float | None, shared: SharedHeads) -> torch.Tensor:
    """Attention output [rows, queries, query heads, dim] of `query` [rows, query heads, queries, dim] on
    each row's head in `shared` and then on its own `key`/`value` [rows, KV heads, columns, dim] under
    `mask` (bool [rows, 1, queries, columns], True where a query sees a column; None: every column but
    a later query's own)."""
    rows, query_heads, width, dim = query.shape
    kv_heads = key.shape[1]
    fold = query_heads // kv_heads
    scale = scaling if scaling is not None else dim ** -0.5
    stacked = query.reshape(rows, kv_heads, fold * width, dim)      # query head h = KV head h // fold
    seen = _buffer_mask(mask, rows, fold, width, key.shape[2], query.device)
    out, total, top = _part(stacked, key, value, seen, scale)
    layer = module.layer_idx
    for head, members in shared.groups():
        keys, values = shared.heads[head][layer]
        index = members.to(query.device)
        mine = stacked.index_select(0, index).transpose(0, 1).reshape(kv_heads, -1, dim)   # [kv, rows * fold * w, d]
        h_out, h_total, h_top = _part(mine, keys[0], values[0], None, scale)
        count = index.numel()

        def back(x: torch.Tensor, count=count) -> torch.Tensor:
            return x.reshape(kv_heads, count, fold * width, x.shape[-1]).transpose(0, 1)
        h_out, h_total, h_top = back(h_out), back(h_total), back(h_top)
        b_out, b_total, b_top = out[index], total[index], top[index]
        joint = torch.maximum(b_top, h_top)
        b_weight, h_weight = torch.exp(b_top - joint), torch.exp(h_top - joint)
        out[index] = (b_out * b_weight + h_out * h_weight)
        total[index] = b_total * b_weight + h_total * h_weight
        top[index] = joint
    out = out / total
    return out.reshape(rows, kv_heads, fold, width, dim).reshape(rows, query_heads, width, dim).transpose(1, 2).contiguous()


def _part(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, seen: torch.Tensor | None, scale: float
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Unnormalised attention of `query` on `key`/`value`: (sum of weights x values, sum of weights, the
    maximum score the weights are taken against)."""
    scores = torch.matmul(query, key.transpose(-1, -2)).mul_(scale)
    if seen is not None:
        scores.masked_fill_(~seen, float("-inf"))
    top = scores.amax(dim=-1, keepdim=True).clamp_min_(torch.finfo(scores.dtype).min)   # a query that sees nothing: weights 0
    weights = scores.sub_(top).exp_()
    return torch.matmul(weights, value), weights.sum(dim=-1, keepdim=True), top


def _buffer_mask(mask: torch.Tensor | None, rows: int, fold: int, width: int, columns: int,
                 device: torch.device) -> torch.Tensor | None:
    """The mask in the stacked query layout [rows, 1, fold * width, columns] (every query head of a KV
    head sees what its query sees); None where every query sees every column."""
    if mask is None:
        if width == 1:
            return None
        # no mask given: causal over the new columns, which are the last `width`
        mask = (torch.arange(columns, device=device)[None, :]
                <= torch.arange(columns - width, columns, device=device)[:, None])[None, None]
    if mask.dtype != torch.bool:
        mask = mask == 0     # an additive float mask: 0 where a column is seen
    mask = mask.expand(rows, 1, width, columns)
    return mask[:, :, None].expand(rows, 1, fold, width, columns).reshape(rows, 1, fold * width, columns)


__all__ = ["SharedHeads", "active", "attention", "can_share", "reading"]
