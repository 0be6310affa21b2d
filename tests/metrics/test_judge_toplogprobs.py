"""Judges behind a chat API that shows its top next tokens (OpenAI, vLLM) are read from them
(tasks/metrics/rating.py, method "toplogprobs"): through the real `openai` client against the local
server, the judge's score is the expectation computed by hand from the server's top list; a model that
refuses logprobs, or an Anthropic judge, is generated and parsed as before."""

from __future__ import annotations

import math

import polars as pl
import pytest

from tasks.core.config import LLMConfig
from tasks.core.schema import REFERENCES, SCORING_CANDIDATES, SYNOPSES_WIDE
from tasks.lm.lazy import LazyLM
from tasks.metrics.judge import judge_family
from tasks.metrics.rating import rate_member
from tasks.metrics.registry import REGISTRY, Resources
from tasks.testing.openai_server import OpenAIServer
from tests.chat_api_data import OPENAI_ENV as ENV
from tests.chat_api_data import OPENAI_KEY as KEY
from tests.chat_api_data import openai_config as config

TOP = [("6", 0.4), (" 9", 0.3), ("1", 0.1), ("\n", 0.1)]   # after "Score: "; after "Score: 1": "0" 0.5


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(ENV, KEY)


def scripted(body: dict) -> tuple[str, list[dict], int, int]:
    written = body["messages"][-1]["content"]
    table = [("0", 0.5), (".", 0.4)] if written.endswith("Score: 1") else TOP
    top = [{"token": t, "logprob": math.log(p), "bytes": []} for t, p in table]
    return top[0]["token"], [{**top[0], "top_logprobs": top}], 10, 1


def by_hand() -> float:
    mass = {6: 0.4, 9: 0.3, 10: 0.1 * 0.5, 1: 0.1 - 0.1 * 0.5}
    return sum(k * v for k, v in mass.items()) / sum(mass.values())


def frames() -> tuple[pl.DataFrame, pl.DataFrame, None, pl.DataFrame]:
    """candidates, references, negatives (none), synopses."""
    cands = pl.DataFrame([{"paper_id": "p", "candidate": "c", "source": "m", "review_id": None,
                           "review_text": "the method is weak", "judgments": None}], schema=SCORING_CANDIDATES)
    refs = pl.DataFrame([{"paper_id": "p", "review_id": "h", "review_text": "the paper is good", "judgments": None}],
                        schema=REFERENCES)
    syn = pl.DataFrame([{"paper_id": "p", "abstract": "the paper of the method"}], schema=SYNOPSES_WIDE)
    return cands, refs, None, syn


def judge(server: OpenAIServer, tmp_path) -> LazyLM:
    cfg: LLMConfig = config(server, continue_final_message=True)
    return LazyLM(cfg, tmp_path)


def test_a_chat_api_judge_is_read_from_its_top_logprobs(tmp_path):
    with OpenAIServer(lambda body: "Score: 3", chat_logprobs=scripted) as server:
        resources = Resources(llm=judge(server, tmp_path))
        row = judge_family([REGISTRY["llm_judge_noref"]], *frames(), resources).scores.row(0, named=True)
        assert row["eval_lm"] == "toplogprobs:openai/gpt-test" and row["reason"] is None
        assert row["score"] == pytest.approx(by_hand())
        assert all(b.get("logprobs") for b in server.received)       # nothing generated to parse
        assert resources.log.answers()["value"].to_list() == [pytest.approx(by_hand())]
        assert resources.log.usage()["input_tokens"].to_list() == [20]   # "Score: " and "Score: 1", 10 each
        # judge_method = "generate" still generates and parses
        generated = judge_family([REGISTRY["llm_judge_noref"]], *frames(),
                                 Resources(llm=judge(server, tmp_path), judge_method="generate")).scores
        assert generated["eval_lm"].to_list() == ["generate:openai/gpt-test"] and generated["score"][0] == 3.0


@pytest.mark.parametrize("status", [403, 400])
def test_a_judge_that_refuses_logprobs_falls_back_to_generate_and_parse(tmp_path, status):
    with OpenAIServer(lambda body: "Score: 3", chat_logprobs=scripted, refuse_logprobs=status) as server:
        lm = judge(server, tmp_path)
        values, how, written = rate_member(lm, "auto", [("s", "u")], ["k"], 16, analysis=False)
        assert (values, how) == ([3.0], "generate") and written[0].text.startswith("Score:")
        rows = judge_family([REGISTRY["llm_judge_noref"]], *frames(), Resources(llm=lm)).scores
        assert rows["eval_lm"].to_list() == ["generate:openai/gpt-test"] and rows["score"][0] == 3.0


def test_an_analysis_judge_without_continuing_generates_and_parses(tmp_path):
    """A server that cannot continue the analysis cannot be asked to write it out again: parsed."""
    answer = "<analysis>\nThe review is vague.\n</analysis>\nScore: 4"
    with OpenAIServer(lambda body: answer, chat_logprobs=scripted) as server:
        lm = LazyLM(config(server), tmp_path)
        values, how, _ = rate_member(lm, "auto", [("s", "u")], ["k"], 64, analysis=True)
    assert (values, how) == ([4.0], "generate")


@pytest.mark.slow
def test_the_embedded_model_behind_the_server_is_read_as_by_hand(tmp_path, embedded_lm):
    """SmolLM2 behind the server: its real top 20 after "Score: ", "10" read as "1" then "0"."""
    import openai

    from tasks.testing.completions import LocalChatLogprobs
    from tasks.testing.openai_server import local_model_responder

    system, user = "Rate the review from 0 to 10. Answer with Score: <n>.", "Review: the proofs are incomplete."
    with OpenAIServer(local_model_responder("smollm2"), chat_logprobs=LocalChatLogprobs("smollm2")) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key=KEY, max_retries=0)

        def top(written: str) -> dict[str, float]:
            answer = client.chat.completions.create(
                model="gpt-test", max_tokens=1, logprobs=True, top_logprobs=20, temperature=0,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user},
                          {"role": "assistant", "content": written}],
                extra_body={"continue_final_message": True, "add_generation_prompt": False})
            listed = answer.choices[0].logprobs.content[0].top_logprobs
            assert len(listed) == 20 and listed == sorted(listed, key=lambda t: -t.logprob)
            seen: dict[str, float] = {}
            for t in listed:
                seen[t.token.strip()] = seen.get(t.token.strip(), 0.0) + math.exp(t.logprob)
            return seen

        first = top("Score: ")
        mass = {n: first.get(str(n), 0.0) for n in range(11)}
        if "10" not in first and first.get("1", 0.0) > 0:
            mass[10] = first["1"] * top("Score: 1").get("0", 0.0)
            mass[1] = max(0.0, first["1"] - mass[10])
        expected = sum(k * v for k, v in mass.items()) / sum(mass.values())
        values, how, _ = rate_member(judge(server, tmp_path), "auto", [(system, user)], ["k"], 16, analysis=False)
    # the server reuses the KV of the request before (prefix caching): one position read twice agrees to
    # float32 noise (4e-6 here), not bit for bit
    assert how == "toplogprobs" and values[0] == pytest.approx(expected, abs=1e-4)


def test_an_anthropic_judge_shows_no_top_logprobs_and_is_parsed(tmp_path, monkeypatch):
    from tasks.lm import CachedLM, LLMCache
    from tasks.testing.anthropic_server import AnthropicServer
    from tests.chat_api_data import ANTHROPIC_KEY, anthropic_lm

    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    with AnthropicServer(lambda body: "Score: 7") as server:
        backend = anthropic_lm(server)
        lm = CachedLM(backend, LLMCache(tmp_path / "llm.sqlite"), backend.cfg)
        values, how, _ = rate_member(lm, "auto", [("s", "u")], ["k"], 16, analysis=False)
    assert (values, how) == ([7.0], "generate")
