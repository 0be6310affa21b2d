"""Every engine request fits its model: the cutting rule, its flag, and the score rows that carry it."""

from __future__ import annotations

import math

import polars as pl
import pytest

from tasks.core.schema import TRUNCATED_REASON
from tasks.lm.fitting import PROMPT_TAIL, fit_prompt, fit_request, request_window
from tasks.lm.types import LoglikelihoodRequest
from tasks.metrics.gem import assemble_scores
from tests.metrics.test_qualify_readout_panel import WORDS, tiny_lm

EOT = (99,)


def test_the_rule_keeps_continuations_identical_across_prompts_and_prompts_head_and_tail():
    assert request_window(2048) == 2048 and request_window(131072) == 8192 and request_window(None) == 8192
    long_y = tuple(range(1000)) + EOT
    a = fit_request(tuple(range(10_000, 10_050)), long_y, EOT, 512)
    b = fit_request((7,), long_y, EOT, 512)
    assert a[1] == b[1] == tuple(range(256)) and a[2] and b[2]      # same scored tokens, no end-of-turn
    prompt = tuple(range(5000))
    cut, flag = fit_prompt(prompt, 300)
    assert flag and len(cut) == 300 and cut[-PROMPT_TAIL:] == prompt[-PROMPT_TAIL:] and cut[:10] == prompt[:10]
    short = fit_request((1, 2, 3), (4, 5) + EOT, EOT, 512)
    assert short == ((1, 2, 3), (4, 5) + EOT, False)


@pytest.fixture(scope="module")
def short_context_lm(tmp_path_factory):
    """A random-weight Llama whose context is 256 tokens (shapes only, no quality claim)."""
    import transformers

    from tasks.lm.loglikelihood import LoglikelihoodEngine

    folder = tiny_lm(tmp_path_factory.mktemp("ctx") / "m", 0)
    config = transformers.AutoConfig.from_pretrained(folder)
    config.max_position_embeddings = 256
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, config=config).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    return LoglikelihoodEngine(model, tokenizer, token_budget=128)


@pytest.mark.slow
def test_a_5_mb_review_is_cut_scored_and_flagged_within_one_window(short_context_lm):
    engine = short_context_lm
    words = WORDS[13:]
    review = " ".join(words[i % len(words)] for i in range(650_000))       # about 5 MB of words
    assert len(review) > 4_000_000
    results = engine.score([LoglikelihoodRequest("the review", "the paper " * 3000, review),
                            LoglikelihoodRequest("the review", "", review),
                            LoglikelihoodRequest("the review", "the paper", "the model is tested")])
    cond, marg, normal = results
    assert cond.truncated and marg.truncated and not normal.truncated
    assert cond.n_tokens == marg.n_tokens == engine.window // 2 == 128
    assert all(math.isfinite(r.logprob) for r in results)
    assert engine.stats.truncated == 2
    # memory of a batch: never wider than one window, whatever the input
    assert engine.stats.padded_tokens <= engine.stats.batches * engine.window


def test_score_rows_on_a_cut_text_keep_their_score_and_say_why():
    pairs = pl.DataFrame({"paper_id": ["p", "p"], "candidate": ["c1", "c2"], "source": ["m", "m"],
                          "reference": ["r", "r"], "metric": ["gem_raw", "gem_raw"], "cond_key": ["a", "c"],
                          "marg_key": ["b", "d"], "reason": [None, None]}, schema_overrides={"reason": pl.String})
    results = pl.DataFrame({"key": ["a", "b", "c", "d"], "logprob": [-1.0, -3.0, -2.0, -2.5],
                            "n_tokens": [5, 5, 7, 7], "truncated": [True, True, False, False]})
    scores = assemble_scores(pairs, results, "lm").sort("candidate")
    assert scores["score"].to_list() == [2.0, 0.5]
    assert scores["reason"].to_list() == [TRUNCATED_REASON, None]
    older = assemble_scores(pairs, results.drop("truncated"), "lm")   # results written before the flag
    assert older["reason"].null_count() == 2
