"""The fast greedy decoder (tasks/lm/decode.py) and the constraint's precomputed masks.

The masks are checked on a hand-made vocabulary (a real `tokenizers` WordLevel tokenizer) against
the rule applied token by token; the decoder is checked against transformers' `generate` on the
embedded SmolLM2 (slow)."""

from __future__ import annotations

import pytest
import torch

from tasks.lm.line_prefixes import LinePrefixConstraint

PREFIXES = ("The reviewer appreciates ", "The reviewer criticizes ", "The rule ")
PIECES = ["<eos>", "<unk>", "The", " reviewer", " rev", "iewer", " appreciates", " app", "reciates ",
          "reciates", " ", " criticizes ", " criticizes", "The reviewer", "The rev", " rule", " rule ",
          "The rule is", " the", " method", " is", " clear", ".", "\n", ".\n", "\nThe", "\nThe reviewer",
          "x", "\r", "s the"]


@pytest.fixture(scope="module")
def rules() -> LinePrefixConstraint:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {piece: i for i, piece in enumerate(PIECES)}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="<unk>")),
                                        eos_token="<eos>", unk_token="<unk>")
    return LinePrefixConstraint(tokenizer, PREFIXES, [vocab["<eos>"]], min_content=2)


def openings() -> set[str]:
    return {prefix[:end] for prefix in PREFIXES for end in range(len(prefix))}


def test_opening_masks_equal_the_rule_applied_to_every_token(rules):
    assert "The rev" in openings() and "" in openings()
    for line in sorted(openings()):
        expected = [not rules.never[i] and not rules.stops[i] and bool(text) and rules._opening_allows(line, text)
                    for i, text in enumerate(rules.strings)]
        assert rules.opening_mask(line).tolist() == expected, line
    allowed = {rules.strings[i] for i in rules.opening_mask("The rev").nonzero().flatten().tolist()}
    assert allowed == {"iewer"}
    allowed = {rules.strings[i] for i in rules.opening_mask("").nonzero().flatten().tolist()}
    assert allowed == {"The", "The reviewer", "The rev", "The rule is"}


def test_state_masks_are_shared_and_never_changed_by_a_repeat_refusal(rules):
    row = rules.start("The rule is clear")
    row.content = 2
    before = rules.content_ok.clone()
    row.lines.add("The rule is clear.")
    mask = rules.allowed(row)
    assert not mask[PIECES.index(".")] and not mask[PIECES.index(".\n")]     # the repeat is refused
    assert torch.equal(rules.content_ok, before)                              # the shared mask is intact
    row.lines.clear()
    assert rules.allowed(row) is rules.content_ok
    row.line += "."
    assert rules.allowed(row) is rules.must_break
    assert {rules.strings[i] for i in rules.must_break.nonzero().flatten().tolist()} == {"<eos>", "\n", "\nThe",
                                                                                       "\nThe reviewer"}


@pytest.mark.slow
def test_fast_decoder_answers_byte_for_byte_like_generate(embedded_lm, monkeypatch):
    from tasks.core.config import PreprocessConfig
    from tasks.judgments.extract import LINE_PREFIXES
    from tasks.lm import ChatRequest, chat_spec
    from tasks.lm.local import LocalLM

    system = "You rewrite peer reviews as short judgments."
    reviews = ["The paper is well written. The experiments are too small to support the claims.",
               "Why is the bound tight? The authors should add an ablation.",
               "Novel idea; weak baselines."]
    constrained = [ChatRequest(system, text, 20 + 6 * i, f"c{i}", "The reviewer", line_prefixes=LINE_PREFIXES["review"])
                   for i, text in enumerate(reviews)]
    free = [ChatRequest(system, text, 12, f"f{i}") for i, text in enumerate(reviews)]
    fast = LocalLM(chat_spec(PreprocessConfig()), batch_size=3, decoder="fast")
    slow = LocalLM(chat_spec(PreprocessConfig()), batch_size=3, decoder="generate")
    for requests in (constrained, free):
        ours, reference = fast.generate(requests), slow.generate(requests)
        assert [r.text for r in ours] == [r.text for r in reference]
        assert [(r.output_tokens, r.truncated) for r in ours] == [(r.output_tokens, r.truncated) for r in reference]
    assert all(r.text.startswith("The reviewer ") for r in fast.generate(constrained))
    assert fast.generated_tokens == slow.generated_tokens + sum(r.output_tokens for r in fast.generate(constrained))
    # decoding steps on their own thread count: same answers, the process-wide count restored
    threads = torch.get_num_threads()
    monkeypatch.setenv("GREBENCH_DECODE_THREADS", "1")
    assert [r.text for r in fast.generate(constrained)] == [r.text for r in slow.generate(constrained)]
    assert torch.get_num_threads() == threads
