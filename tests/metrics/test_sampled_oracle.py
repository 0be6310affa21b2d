"""The sampled oracle cells: every question asked k times (each draw its own request and cache key),
the draws averaged; through the local Anthropic-compatible server with the real client, and a local
model's seeded sampling (a tiny random-weight Llama: code paths, never quality)."""

from __future__ import annotations

import math
from collections import Counter

import polars as pl
import pytest

from tasks.core.config import LLMConfig, ScoreConfig
from tasks.core.frames import human_candidates
from tasks.lm import ChatRequest, make_lm
from tasks.lm.cache import request_key
from tasks.metrics import REGISTRY, MissingResource, Resources, score_metrics
from tasks.metrics.negatives import draw_negatives
from tasks.testing.anthropic_server import AnthropicServer, user_text
from tests.metrics.test_metrics_oracle_cells import _refs, _same_paper
from tests.tiny_models import tiny_llama

DRAWS = ("Yes", "No", "Yes", "Yes")   # the made-up oracle's answers to the 1st..4th copy of a same-paper question


def _sampling_responder():
    """Answers a same-paper question with the next of DRAWS each time the same body comes again (a
    sampling server's spread, made countable); other papers: always No."""
    seen: Counter = Counter()

    def respond(params: dict) -> str:
        user = user_text(params)
        if not _same_paper(user):
            return "No"
        seen[user] += 1
        return DRAWS[(seen[user] - 1) % len(DRAWS)]
    return respond


def test_sampled_cell_averages_k_draws_each_cached_on_its_own(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    refs, syn = _refs(n_papers=3, n_reviews=2)
    cands = human_candidates(refs)
    negatives = draw_negatives(cands, refs, 2, seed=0)
    # as `sampling` builds it: an Anthropic model draws at its own setting (the API takes no temperature)
    cfg = LLMConfig(backend="anthropic", model="claude-test", use_batches=False, max_retries=0, temperature="default")
    with AnthropicServer(_sampling_responder()) as server:
        sampler = make_lm(cfg, tmp_path, base_url=server.url)
        scores = score_metrics(["tvd_mi_sampled"], cands, refs, syn,
                               Resources("lm", sampler=sampler, oracle_repeats=4), negatives=negatives)
        calls = server.counts["messages"]
        again = score_metrics(["tvd_mi_sampled"], cands, refs, syn,
                              Resources("lm", sampler=sampler, oracle_repeats=4), negatives=negatives)
        assert server.counts["messages"] == calls                         # every draw cached under its own key
        # one draw is the first draw, cached with the four: no call; its answer is whichever of DRAWS the
        # server gave the first request to arrive (they are sent concurrently), so yes (score 1) or no (0)
        one = score_metrics(["tvd_mi_sampled"], cands, refs, syn, Resources("lm", sampler=sampler, oracle_repeats=1),
                            negatives=negatives)
        assert server.counts["messages"] == calls
        sent = [body.get("temperature") for body in server.received]
    assert again.equals(scores)
    questions = 6 * 3    # 6 pairs: the positive and 2 negatives each, every question distinct
    assert calls == 4 * questions and set(sent) == {None}                 # no sampling parameter sent
    assert (scores["eval_lm"] == "sampled:anthropic/claude-test|t=default|draws=4").all()
    # the positive's critic is the mean of Yes, No, Yes, Yes (+1/2, -1/2, +1/2, +1/2) = 1/4; negatives say No
    assert scores["reason"].is_null().all()
    assert scores["score"].to_list() == pytest.approx([0.25 + 0.5] * 6)
    assert set(one["score"].to_list()) <= {0.0, 1.0}
    assert (one["eval_lm"] == "sampled:anthropic/claude-test|t=default|draws=1").all()


def test_sampled_cells_are_registered_beside_their_cells_and_need_the_sampler() -> None:
    refs, syn = _refs(n_papers=2, n_reviews=2)
    cands = human_candidates(refs)
    for name in ("tvd_mi", "tv_fvar_statement", "gppm_judgment", "kl_direct_report"):
        sampled = REGISTRY[name + "_sampled"]
        assert sampled.needs.name == "llm_sampled_oracle" and sampled.negatives == REGISTRY[name].negatives
    with pytest.raises(MissingResource):
        score_metrics(["gppm_judgment_sampled"], cands, refs, syn, Resources("lm"))


def test_config_builds_the_sampler_at_the_oracle_temperature(tmp_path) -> None:
    from tasks.metrics.resources import build_resources

    cfg = ScoreConfig(oracle_temperature=0.5, oracle_repeats=3)
    built = build_resources(cfg, llm_cache=tmp_path)
    assert built.sampler.cfg.temperature == 0.5 and built.llm.cfg.temperature == 0.0 and built.oracle_repeats == 3
    claude = build_resources(ScoreConfig(oracle=LLMConfig(backend="anthropic", model="claude-x"), oracle_temperature=0.5),
                             llm_cache=tmp_path)
    assert claude.sampler.cfg.temperature == "default"      # the Anthropic API takes no temperature
    with pytest.raises(ValueError):
        ScoreConfig(oracle_repeats=0)


def test_the_anthropic_server_refuses_sampling_parameters_as_the_api_does(monkeypatch) -> None:
    anthropic = pytest.importorskip("anthropic")
    with AnthropicServer(lambda params: "Yes") as server:
        client = anthropic.Anthropic(api_key="test-key", base_url=server.url, max_retries=0)
        with pytest.raises(anthropic.BadRequestError, match="temperature: Extra inputs are not permitted"):
            client.messages.create(model="claude-test", max_tokens=8, messages=[{"role": "user", "content": "hi"}],
                                   extra_body={"temperature": 1.0})


WORDS = ["[UNK]", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>", "Yes", "No", "maybe", "the", "paper",
         "is", "clear", "weak", "strong", "review", "."]


def test_local_model_samples_with_a_seed_of_the_request_and_its_draw(tmp_path) -> None:
    from tasks.lm.loading import ModelSpec
    from tasks.lm.local import LocalLM

    spec = ModelSpec(tiny_llama(tmp_path / "lm", WORDS, sharpen=1.0), dtype="float32", device="cpu")
    greedy = LocalLM(spec, batch_size=4)
    hot = LocalLM(spec, batch_size=4, temperature=1.0)
    assert "greedy" in greedy.identity and "sample-t1" in hot.identity and hot.identity != greedy.identity
    ask = [ChatRequest("the review", "the paper is clear", 6, sample=draw) for draw in range(8)]
    first = [r.text for r in hot.generate(ask)]
    assert len(set(first)) > 1                                             # the draws differ
    alone = [hot.generate([request])[0].text for request in ask]           # each in a batch of its own
    others = [ChatRequest("the review", "the paper is weak", 6, sample=d) for d in range(3)]
    mixed = [r.text for r in hot.generate(others + ask)][3:]               # beside other prompts
    assert first == alone == mixed                                         # a draw is its request's, not its batch's
    assert len({r.text for r in greedy.generate(ask)}) == 1               # greedy: every draw the same answer
    via_hf = LocalLM(spec, batch_size=4, temperature=1.0, decoder="generate")
    assert len({r.text for r in via_hf.generate(ask)}) > 1
    # the draw is part of the cache key; draw 0 keeps the key a request without draws had
    assert request_key(hot.identity, ask[0]) == request_key(hot.identity, ChatRequest("the review", "the paper is clear", 6))
    assert len({request_key(hot.identity, r) for r in ask}) == 8
    assert math.isfinite(hot.tokens_per_second)


def test_the_draws_of_one_prompt_run_its_prompt_once_and_draw_as_alone(tmp_path) -> None:
    from tasks.lm.loading import ModelSpec
    from tasks.lm.local import LocalLM

    spec = ModelSpec(tiny_llama(tmp_path / "lm", WORDS, sharpen=1.0), dtype="float32", device="cpu")
    hot = LocalLM(spec, batch_size=6, temperature=1.0)
    ask = [ChatRequest("the review", text, 6, sample=draw)
           for text in ("the paper is clear", "the paper is weak") for draw in range(3)]
    together = [r.text for r in hot.generate(ask)]
    assert hot._greedy.prefilled == 2                                      # two prompts, six rows
    alone = [LocalLM(spec, batch_size=6, temperature=1.0).generate([request])[0].text for request in ask]
    assert together == alone and len(set(together)) > 2


def test_panel_mean_of_draws_leaves_out_draws_without_an_answer() -> None:
    from tasks.lm.types import ChatResult
    from tasks.metrics.panel import ask_panel

    class Scripted:
        name, model, cfg = "scripted", "m", LLMConfig()

        def generate(self, requests, accept=None):
            texts = {0: "Yes", 1: "I cannot tell", 2: "No", 3: "Yes"}
            return [ChatResult(texts[r.sample]) for r in requests]

    from tasks.metrics.predictors import parse_critic

    got = ask_panel(Resources("lm"), {"q": ("s", "u")}, parse_critic, "oracle:x", 8, models=(Scripted(),), repeats=4)
    assert got["q"] == pytest.approx((0.5 - 0.5 + 0.5) / 3)
    assert pl.Series([got["q"]]).is_finite().all()
