"""A GGUF model is converted once into a transformers folder and loaded from there: same weights, same tokens."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import torch

from tasks.lm.loading import EMBEDDED, _source, chat_ids, converted, embedded_gguf

pytestmark = pytest.mark.slow


def test_the_converted_folder_is_the_gguf_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("GREBENCH_MODEL_CACHE", str(tmp_path))
    gguf = embedded_gguf()
    source, extra = _source(EMBEDDED)
    assert extra == {} and Path(source).parent == tmp_path
    assert (Path(source) / "model.safetensors").is_file()
    made = os.stat(Path(source) / "model.safetensors").st_mtime_ns
    assert converted(gguf) == (source, {})                              # found, not converted again
    assert os.stat(Path(source) / "model.safetensors").st_mtime_ns == made
    assert not [p for p in tmp_path.iterdir() if ".part-" in p.name]    # nothing half-written left

    direct = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
    folder = AutoModelForCausalLM.from_pretrained(source, dtype=torch.bfloat16)
    for (name, a), (_, b) in zip(direct.state_dict().items(), folder.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    tok_direct = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tok_folder = AutoTokenizer.from_pretrained(source)
    ids = chat_ids(tok_direct, "You review papers.", "Rate this: attention is all you need.", "Score:")
    assert chat_ids(tok_folder, "You review papers.", "Rate this: attention is all you need.", "Score:") == ids
    assert folder.generation_config.eos_token_id == direct.generation_config.eos_token_id


def test_an_unwritable_cache_loads_the_gguf_file_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("GREBENCH_MODEL_CACHE", str(blocked / "models"))
    with caplog.at_level(logging.WARNING):
        source, extra = _source(EMBEDDED)
    assert extra == {"gguf_file": embedded_gguf().name} and source == str(embedded_gguf().parent)
    assert "could not keep a converted copy" in caplog.text
