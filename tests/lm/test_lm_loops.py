"""Answers that loop stop where the loop begins (tasks/lm/loops.py), the same in every decoder.

The watch on hand-made token sequences; the decoding loops on a tiny Llama with random weights
(float64, greedy: such a model falls into loops at once); the embedded SmolLM2 on the real case, a
rewrite of a shipped review's judgment lines that repeats one line until its token limit (slow)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tasks.lm.decode import GreedyDecoder
from tasks.lm.loops import MIN_TOKENS, REPEATS, LoopWatch, loop_end
from tests.lm.test_lm_drafts import prompts, tiny  # noqa: F401  (the tiny model fixture)

START = [901, 902, 903, 904, 905]   # a prefix that repeats nothing


def test_a_short_block_loops_once_the_repetition_spans_the_minimum():
    block = list(range(10))
    assert loop_end(START + block * 7) == len(START) + MIN_TOKENS   # 4 repeats are only 40 tokens
    assert loop_end(START + [7] * 80) == len(START) + MIN_TOKENS


def test_a_long_block_loops_at_its_fourth_repeat_and_not_before():
    block = list(range(100, 130))
    assert loop_end(START + block * (REPEATS - 1) + block[:-1]) is None
    assert loop_end(START + block * REPEATS + [1, 2]) == len(START) + REPEATS * len(block)


def test_text_that_never_repeats_a_block_does_not_loop():
    generator = torch.Generator().manual_seed(3)
    assert loop_end(torch.randint(0, 50_000, (4000,), generator=generator).tolist()) is None
    # a list whose lines share their opening but differ after it
    lines = [[11, 12, 13, 14, 15, 16, 17, 18, 100 + i, 19] for i in range(40)]
    assert loop_end([token for line in lines for token in line]) is None


def test_the_watch_says_where_in_a_step_the_loop_began():
    watch = LoopWatch()
    assert watch.extend(START) is None
    assert watch.extend([7] * (MIN_TOKENS + 8)) == len(START) + MIN_TOKENS


@pytest.mark.parametrize("draft_tokens", [0, 8])
def test_a_looping_row_stops_early_and_keeps_the_tokens_it_had(tiny, draft_tokens):   # noqa: F811
    limits = [300] * 4
    free = GreedyDecoder(tiny, draft_tokens=draft_tokens).generate(prompts(), limits, set())
    stopped = GreedyDecoder(tiny, draft_tokens=draft_tokens).generate(prompts(), limits, set(), stop_loops=True)
    loops = [loop_end(answer) for answer in free]
    assert sum(end is not None for end in loops) >= 2, loops   # random weights loop
    for answer, cut, end in zip(free, stopped, loops, strict=True):
        if end is None:
            assert cut == answer
        else:   # stopped at the step where the loop began: at most one drafted step past it
            assert cut[:end] == answer[:end] and end <= len(cut) <= end + draft_tokens + 1 < len(answer)


@pytest.mark.slow
def test_smollm2_stops_a_rewrite_that_repeats_one_line_in_every_decoder():
    import polars as pl

    from tasks.lm.loading import ModelSpec
    from tasks.lm.local import LocalLM
    from tasks.lm.types import ChatRequest
    from tasks.stages.validate.prompts import build_prompt
    reviews = pl.read_csv(Path(__file__).resolve().parents[2] / "tasks/stages/validate/samples/iclr2023_gem/reviews.csv")
    prompt = build_prompt("rephrase", reviews["judgments"][3], None, target="judgments")
    request = ChatRequest(prompt.system, prompt.user, 160)
    free = LocalLM(ModelSpec(), stop_loops=False).generate([request])[0]
    assert free.truncated and not free.looped and free.output_tokens == 160
    answers = {decoder: LocalLM(ModelSpec(), decoder=decoder).generate([request])[0]
               for decoder in ("fast", "stepwise", "generate")}
    for answer in answers.values():
        assert answer.looped and answer.truncated and answer.output_tokens < 160
        assert answer.text == answers["generate"].text and free.text.startswith(answer.text)
