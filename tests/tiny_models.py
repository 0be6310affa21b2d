"""Tiny random-weight chat models the tests build and save (shapes and code paths, never quality)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|> {% endif %}")


def tiny_llama(folder: Path, words: Sequence[str], seed: int = 0, sharpen: float = 8.0,
               max_positions: int = 4096) -> str:
    """A 2-layer random-weight Llama with a word-level tokenizer over `words` (id 0 "[UNK]", id 1
    "<|end|>") and a chat template, saved to `folder`; its head scaled by `sharpen`, so that the
    next-token probabilities clearly differ."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    raw = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]", eos_token="<|end|>",
                                                     pad_token="<|end|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    config = transformers.LlamaConfig(vocab_size=len(words), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=max_positions,
                                      eos_token_id=1, pad_token_id=1, bos_token_id=1, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpen)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)
