"""Drafted greedy decoding (tasks/lm/decode.py, `draft_tokens` > 0) against the one-token loop.

The loop is run on a tiny Llama with random weights built from its configuration (float64, so
the multi-token checking pass and the one-token steps agree to the last bit), over the hand-made
vocabulary of tests/lm/test_lm_decode.py, with and without the line-prefix constraint; the embedded
SmolLM2 runs the same comparison on real requests (slow)."""

from __future__ import annotations

import pytest
import torch

from tasks.lm.decode import GreedyDecoder, PromptLookup
from tasks.lm.line_prefixes import LinePrefixConstraint
from tests.lm.test_lm_decode import PIECES, PREFIXES


def test_prompt_lookup_drafts_what_followed_the_latest_occurrence():
    lookup = PromptLookup([1, 2, 3, 4, 9, 2, 3, 5, 6, 7, 2, 3])
    assert lookup.draft(3) == [5, 6, 7]          # "2 3" last seen before 5
    assert lookup.draft(0) == []
    lookup.extend([5])
    assert lookup.draft(4) == [6, 7, 2, 3]       # "2 3 5" seen once: what followed it
    lookup.extend([8])
    assert lookup.draft(4) == []                 # "5 8" and "3 5 8" never seen before
    assert PromptLookup([4, 4]).draft(2) == []   # one token of history: no 2-gram before it


@pytest.fixture(scope="module")
def tiny():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(PIECES), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         attn_implementation="sdpa")
    return LlamaForCausalLM(config).to(torch.float64).eval()


def prompts() -> list[tuple[int, ...]]:
    """Prompts sharing a head, of different lengths, with repeated pieces for drafts to copy."""
    generator = torch.Generator().manual_seed(1)
    head = [2, 13, 18, 19]
    bodies = [torch.randint(2, len(PIECES), (length,), generator=generator).tolist() for length in (30, 11, 23, 5)]
    return [tuple(head + body + body[:6]) for body in bodies]


def decode(model, draft_tokens: int, limits, constraint=None, prefills=None, monkeypatch=None, record=None,
           stops=frozenset({0}), spare=None):
    decoder = GreedyDecoder(model, draft_tokens=draft_tokens)
    decoder.spare_columns = spare or decoder.spare_columns
    if record is not None:
        verify = GreedyDecoder._verify

        def counted(logits, draft, *args):
            taken = verify(logits, draft, *args)
            record.append((len(draft), len(taken) - 1))
            return taken

        monkeypatch.setattr(GreedyDecoder, "_verify", staticmethod(counted))
    return decoder.generate(prompts(), limits, set(stops), constraint, prefills), decoder


def test_drafted_decoding_equals_the_one_token_loop(tiny, monkeypatch):
    limits = [40, 25, 60, 33]
    plain, _ = decode(tiny, 0, limits)
    steps: list[tuple[int, int]] = []
    drafted, decoder = decode(tiny, 4, limits, monkeypatch=monkeypatch, record=steps)
    assert drafted == plain
    assert [len(row) for row in drafted] == [min(limit, len(row)) for limit, row in zip(limits, plain, strict=True)]
    kept = {count for fed, count in steps if fed}
    assert len(kept) > 1 and max(kept) > 0         # rows kept different numbers of drafted tokens
    assert decoder.forwards < sum(map(len, plain)) - len(plain)   # fewer passes than tokens


def long_lines() -> LinePrefixConstraint:
    """The line-prefix rules on the hand-made vocabulary, with lines of at least 12 tokens (long
    enough for the tiny model to repeat itself, so that drafts are kept)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {piece: i for i, piece in enumerate(PIECES)}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="<unk>")),
                                        eos_token="<eos>", unk_token="<unk>")
    return LinePrefixConstraint(tokenizer, PREFIXES, [vocab["<eos>"]], min_content=12)


@pytest.mark.slow
def test_drafted_decoding_equals_the_one_token_loop_under_the_constraint(tiny, monkeypatch):
    constraint = long_lines()
    limits = [30, 45, 20, 50]
    prefills = ["The", "", "The rule", "The reviewer"]
    plain, _ = decode(tiny, 0, limits, constraint, prefills)
    steps: list[tuple[int, int]] = []
    drafted, _ = decode(tiny, 3, limits, constraint, prefills, monkeypatch=monkeypatch, record=steps)
    assert drafted == plain
    kept = {count for fed, count in steps if fed}
    assert len(kept) > 1 and max(kept) > 0
    for prefill, row in zip(prefills, drafted, strict=True):
        text = prefill + "".join(PIECES[token] for token in row if token != 0)
        assert all(line.startswith(PREFIXES) for line in text.split("\n")[:-1])


@pytest.mark.slow
def test_a_full_buffer_is_squeezed_without_changing_the_answer(tiny):
    """Long answers with many rejected columns: the buffer is squeezed (holes dropped) mid-answer."""
    limits = [120, 90, 110, 70]
    plain, _ = decode(tiny, 0, limits, stops=())
    drafted, decoder = decode(tiny, 6, limits, stops=(), spare=7)
    assert drafted == plain
    assert [len(row) for row in drafted] == limits
    assert decoder.squeezes > 0 and decoder.kept > 0


@pytest.mark.slow
def test_drafts_on_smollm2_answer_like_the_one_token_loop(embedded_lm):
    from tasks.core.config import PreprocessConfig
    from tasks.judgments.extract import LINE_PREFIXES
    from tasks.lm import ChatRequest, chat_spec
    from tasks.lm.local import LocalLM

    system = "You rewrite peer reviews as short judgments."
    reviews = ["The paper is well written. The experiments are too small to support the claims. "
               "The experiments are too small.",
               "Why is the bound tight? The authors should add an ablation of the bound.",
               "Novel idea; weak baselines. The baselines are weak."]
    requests = [ChatRequest(system, text, 40 + 8 * i, f"c{i}", "The reviewer", line_prefixes=LINE_PREFIXES["review"])
                for i, text in enumerate(reviews)]
    requests += [ChatRequest(system, text, 30, f"f{i}") for i, text in enumerate(reviews)]
    fast = LocalLM(chat_spec(PreprocessConfig()), batch_size=3, decoder="fast")
    stepwise = LocalLM(chat_spec(PreprocessConfig()), batch_size=3, decoder="stepwise")
    ours, reference = fast.generate(requests), stepwise.generate(requests)
    assert [(r.text, r.output_tokens, r.truncated) for r in ours] == [
        (r.text, r.output_tokens, r.truncated) for r in reference]
    assert fast._greedy.kept > 0 and fast._greedy.forwards < stepwise._greedy.forwards


def test_prompts_sharing_a_long_prefix_compute_it_once_and_answer_like_generate(tiny):
    """Two clusters of prompts (a judge's prompts quoting one paper each): each cluster's shared
    prefix runs once, is kept, and a later call reuses it; the answers equal transformers' `generate`."""
    generator = torch.Generator().manual_seed(3)

    def pieces(n: int) -> list[int]:
        return torch.randint(2, len(PIECES), (n,), generator=generator).tolist()

    system, papers = [2, 13, 18], [pieces(60), pieces(50)]
    batch = [tuple(system + paper + pieces(n)) for paper in papers for n in (7, 12, 4)]
    fed: list[int] = []
    hook = tiny.model.register_forward_pre_hook(lambda _, args, kwargs: fed.append(kwargs["input_ids"].shape[1]),
                                                with_kwargs=True)
    try:
        decoder = GreedyDecoder(tiny, draft_tokens=3)
        limits = [20, 14, 25, 9, 30, 18]
        answers = decoder.generate(batch, limits, {0})
        prefill = sum(fed[: len(papers) + len(batch)])     # the clusters' heads, then each prompt's body
        assert prefill == sum(len(system) + len(p) for p in papers) + sum(n for n in (7, 12, 4)) * 2
        assert sorted(len(h) for h in decoder._heads) == [len(system) + 50, len(system) + 60]
        fed.clear()
        later = tuple(system + papers[0] + pieces(9))
        assert decoder.generate([later], [15], {0})[0] == reference(tiny, [later], [15])[0]
        assert fed[0] == 9                                  # only its own tail: the paper's head was kept
    finally:
        hook.remove()
    assert answers == reference(tiny, batch, limits)


def reference(model, batch, limits, pad: int = 1) -> list[list[int]]:
    """transformers' greedy `generate` on the left-padded batch, each row cut after its stop or limit."""
    width = max(map(len, batch))
    ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in batch])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max(limits), do_sample=False,
                             pad_token_id=pad, eos_token_id=0)
    rows = [row[:limit] for row, limit in zip(out[:, width:].tolist(), limits, strict=True)]
    return [row[: row.index(0) + 1] if 0 in row else row for row in rows]
