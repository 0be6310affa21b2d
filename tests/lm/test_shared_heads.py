"""Decoding steps that read a prompt head several rows share where it is (tasks/lm/shared_heads.py).

The split attention is checked against SDPA over each row's head and own columns laid end to end; the
decoder with shared heads against the decoder with the head copied into every row, on the embedded
SmolLM2 in float32 (slow). The tiny float64 model of tests/lm/test_lm_drafts.py runs the shared path
against transformers' `generate` there (drafts, a squeezed buffer, kept heads)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tasks.lm import shared_heads
from tasks.lm.decode import GreedyDecoder
from tasks.lm.shared_heads import SharedHeads


class Layer(torch.nn.Module):
    layer_idx = 1


def reference(query, keys, values, mask, heads, of_row, layer=1):
    """SDPA per row on [its head | its own columns], the head seen by every query."""
    rows, _, width, dim = query.shape
    out = []
    for r in range(rows):
        head_k, head_v = (heads[of_row[r]][layer] if of_row[r] is not None
                          else (keys.new_zeros(1, keys.shape[1], 0, dim), values.new_zeros(1, keys.shape[1], 0, dim)))
        k, v = torch.cat([head_k[0], keys[r]], 1), torch.cat([head_v[0], values[r]], 1)
        seen = torch.cat([torch.ones(1, width, head_k.shape[2], dtype=torch.bool), mask[r]], -1)
        found = F.scaled_dot_product_attention(query[r : r + 1], k[None], v[None], attn_mask=seen[None], enable_gqa=True)
        out.append(found.transpose(1, 2)[0])
    return torch.stack(out)


@pytest.mark.parametrize("width", [1, 3])
def test_attention_split_at_the_shared_heads_equals_attention_on_the_whole_row(width):
    """Four rows, two heads of different lengths (two rows on the first), one row without a head, three
    query heads per KV head; left padding and a rejected drafted column masked out."""
    torch.manual_seed(0)
    rows, kv_heads, fold, dim, columns = 4, 3, 3, 16, 12

    def head(length):
        return [(torch.randn(1, kv_heads, length, dim), torch.randn(1, kv_heads, length, dim)) for _ in range(2)]
    heads, of_row = [head(20), head(27)], [0, 1, 0, None]
    query = torch.randn(rows, kv_heads * fold, width, dim)
    keys, values = torch.randn(rows, kv_heads, columns, dim), torch.randn(rows, kv_heads, columns, dim)
    mask = torch.ones(rows, 1, width, columns, dtype=torch.bool)
    mask[0, :, :, :4] = False                       # left padding
    mask[1, :, :, :2] = False
    mask[2, :, :, columns - width - 1] = False      # a drafted column rejected before
    for j in range(width):                          # a query sees the new columns up to its own
        mask[:, :, j, columns - width + j + 1 :] = False
    found = shared_heads.attention(Layer(), query, keys, values, mask, None, SharedHeads(heads, of_row))
    assert found.shape == (rows, width, kv_heads * fold, dim)
    assert torch.allclose(found, reference(query, keys, values, mask, heads, of_row), atol=1e-5)


def test_rows_that_leave_the_batch_keep_the_others_heads():
    shared = SharedHeads([[], []], [0, None, 1, 0])
    kept = shared.keep([0, 2])
    assert kept.of_row == [0, 1] and kept.heads is shared.heads
    assert [(head, rows.tolist()) for head, rows in shared.groups()] == [(0, [0, 3]), (1, [2])]


@pytest.fixture(scope="module")
def smollm2_float32():
    from tasks.lm import ModelSpec, load_model

    return load_model(ModelSpec(dtype="float32"))


@pytest.mark.slow
def test_shared_heads_answer_like_copied_heads_and_read_the_head_once(smollm2_float32):
    """A judge's batch: eight prompts quoting one 600-token text, then a question each. Answers with the
    head read in place equal those with the head copied into every row (greedy, with and without drafts),
    and the rows' buffer holds only what follows the head."""
    model, tokenizer = smollm2_float32
    text = " ".join(f"Section {i} reports that the method improves accuracy by {i} points on task {i}." for i in range(60))
    head = tokenizer(text)["input_ids"][:600]
    prompts = [tuple(head + tokenizer(f"\nQuestion {i}: what does section {3 * i} report? Answer:")["input_ids"])
               for i in range(8)]
    stops = {tokenizer.eos_token_id}
    widths = []
    prefill = GreedyDecoder._prefill

    def watched(self, *args):
        found = prefill(self, *args)
        widths.append(found[1].layers[0].used)
        return found
    for drafts in (0, 3):
        shared = GreedyDecoder(model, draft_tokens=drafts)
        copied = GreedyDecoder(model, draft_tokens=drafts, share_heads=False)
        assert shared.share_heads and not copied.share_heads
        GreedyDecoder._prefill = watched
        try:
            answers = shared.generate(prompts, [40] * 8, stops)
            assert answers == copied.generate(prompts, [40] * 8, stops)
        finally:
            GreedyDecoder._prefill = prefill
        assert widths[-2] < 40 < 600 < widths[-1]    # the buffer's columns: own tokens only, then head and all


def test_models_in_bfloat16_keep_their_heads_copied():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, attn_implementation="sdpa")
    model = LlamaForCausalLM(config).eval()
    assert shared_heads.can_share(model)
    assert not shared_heads.can_share(model.to(torch.bfloat16))
    assert not GreedyDecoder(model).share_heads
