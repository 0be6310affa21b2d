"""Freed CPU memory goes back to the system: a long scoring loop's resident memory holds its live tensors,
not the scattered free blocks of every batch before (tasks/lm/cpu.py `release_freed`)."""

import sys
from pathlib import Path

import pytest

from tasks.lm import cpu


def resident_kb() -> int:
    return next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                if line.startswith("VmRSS:"))


@pytest.mark.skipif(not sys.platform.startswith("linux") or cpu._libc_trim() is None, reason="glibc's malloc_trim")
def test_freed_blocks_scattered_in_the_heap_leave_the_resident_memory(monkeypatch):
    blocks = [bytearray(60_000) for _ in range(4_000)]      # 240 MB of heap blocks, below the mmap threshold
    kept = blocks[::50]                                     # a live block every 3 MB pins the heap's pages
    del blocks
    before = resident_kb()
    monkeypatch.setattr(cpu, "_RELEASED", [0.0, 0.0])
    cpu.release_freed()
    after = resident_kb()
    assert before - after > 150_000, (before, after)        # the free pages are back with the system
    assert len(kept) == 80


def test_a_release_waits_its_interval_after_the_last_one(monkeypatch):
    calls = []
    monkeypatch.setattr(cpu, "_libc_trim", lambda: calls.append)
    monkeypatch.setattr(cpu, "_RELEASED", [0.0, 0.0])
    cpu.release_freed()
    cpu.release_freed()                                     # within RELEASE_EVERY_S of the first: skipped
    assert calls == [0]
    monkeypatch.setattr(cpu, "_RELEASED", [cpu._RELEASED[0] - cpu.RELEASE_EVERY_S, cpu._RELEASED[1]])
    cpu.release_freed()
    assert calls == [0, 0]


@pytest.mark.skipif(not Path("/proc/self/statm").is_file(), reason="/proc")
def test_a_process_grown_since_the_last_release_releases_at_once(monkeypatch):
    """Between two releases on the clock the freed pages of many batches stayed resident: growth by
    RELEASE_AFTER_GROWTH releases without waiting, so a batch landing just after a release cannot lift the peak."""
    calls = []
    monkeypatch.setattr(cpu, "_libc_trim", lambda: calls.append)
    monkeypatch.setattr(cpu, "_RELEASED", [0.0, 0.0])
    cpu.release_freed()
    assert calls == [0] and cpu._RELEASED[1] == cpu.resident_bytes() > 0
    grown = bytearray(cpu.RELEASE_AFTER_GROWTH // 2)        # live memory, touched page by page
    grown[::4096] = b"x" * len(grown[::4096])
    cpu.release_freed()                                     # half the growth, within the interval: skipped
    assert calls == [0]
    more = bytearray(cpu.RELEASE_AFTER_GROWTH)
    more[::4096] = b"x" * len(more[::4096])
    cpu.release_freed()                                     # grown past the bound: released at once
    assert calls == [0, 0]
    del grown, more


@pytest.mark.slow
def test_a_released_int8_model_stays_released_when_its_tokenizer_is_asked():
    """The sentence unit counts its prompts' tokens after the last decoding stage dropped the int8 model:
    the tokenizer comes without the weights (loading them again was the demo's 0.5 GiB spike)."""
    from tasks.lm import release_decoding_models
    from tasks.lm.loading import ModelSpec, load_model, loaded_specs
    from tasks.lm.local import LocalLM
    from tasks.lm.types import ChatRequest

    spec = ModelSpec(quantization="int8")
    load_model(spec)
    assert spec.resolved() in release_decoding_models()
    lm = LocalLM(spec)
    ids = lm.tokenizer("The reviewer appreciates")["input_ids"]
    prompt = lm.prompt_ids(ChatRequest("system", "user", 8))
    assert ids and prompt
    assert spec.resolved() not in loaded_specs()
