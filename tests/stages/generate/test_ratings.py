"""A candidate's rating through a chat API (tasks/stages/generate/ratings.py): a server that continues
answers and shows its top next tokens is read from them ("toplogprobs:..."), the expectation over the
common scale by hand; one that refuses logprobs is asked to continue and parsed ("asked:..."), as before;
one that can do neither leaves it unrated ("answer"). A review that states a rating keeps it ("stated")
whatever the backend, and only the others are read."""

from __future__ import annotations

import math

import pytest

from tasks.core.config import CandidateConfig
from tasks.lm import make_lm
from tasks.stages.generate.ratings import Answered, on_common_scale, rate_answers, stated_rating
from tasks.testing.openai_server import OpenAIServer
from tests.chat_api_data import OPENAI_ENV as ENV
from tests.chat_api_data import OPENAI_KEY as KEY

SCALE = (1.0, 3.0, 5.0, 6.0, 8.0, 10.0)
ANSWER = "## Summary\n\nA clear paper.\n\n<rating>\n"           # cut at its rating tag: no rating stated
STATED = "## Summary\n\nA clear paper.\n\n<rating>\n5\n</rating>"


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(ENV, KEY)


def scripted(body: dict) -> tuple[str, list[dict], int, int]:
    """After the tag: 8 .5, "1" .2 (then "0" .75: 10 is "1", "0"), 6 .1, a word .1."""
    written = body["messages"][-1]["content"]
    table = [("0", 0.75), ("\n", 0.2)] if written.endswith("<rating>\n1") else \
        [("8", 0.5), ("1", 0.2), ("6", 0.1), ("Score", 0.1)]
    top = [{"token": t, "logprob": math.log(p), "bytes": []} for t, p in table]
    return top[0]["token"], [{**top[0], "top_logprobs": top}], 10, 1


def candidate(server: OpenAIServer, **overrides) -> CandidateConfig:
    settings = {"name": "gpt-test", "backend": "openai", "model": "gpt-test", "base_url": server.base_url,
                "api_key_env": ENV, "continue_final_message": True, "knowledge_cutoff": "2024-06-30",
                "use_batches": False, "max_retries": 1, **overrides}
    return CandidateConfig(**settings)


def test_a_served_candidate_is_read_from_its_top_logprobs(tmp_path):
    answers = [Answered("k", "Review the paper.", "The paper.", ANSWER)]
    with OpenAIServer(lambda body: "3\n</rating>", chat_logprobs=scripted) as server:
        cand = candidate(server)
        ratings, method, extra = rate_answers(answers, make_lm(cand, tmp_path), cand, SCALE)
        mass = {8: 0.5, 6: 0.1, 10: 0.2 * 0.75, 1: 0.2 - 0.2 * 0.75}
        assert method == {"k": "toplogprobs:openai/gpt-test"}
        # usage: one empty answer per review with what its two requests cost (the server counts 10 + 1 each)
        assert [(c.text, c.input_tokens, c.output_tokens, c.cached) for c in extra] == [("", 20, 2, False)]
        assert ratings["k"] == pytest.approx(sum(k * v for k, v in mass.items()) / sum(mass.values()))
        assert server.received[0]["messages"][-1]["content"] == "## Summary\n\nA clear paper.\n\n<rating>\n"
        calls = server.counts["chat"]
        again, _, spent = rate_answers(answers, make_lm(cand, tmp_path), cand, SCALE)
        assert again == ratings and server.counts["chat"] == calls   # cached: no call
        assert [(c.input_tokens, c.cached) for c in spent] == [(0, True)]


def test_refused_logprobs_fall_back_to_asking_and_no_continuing_to_the_answer(tmp_path):
    answers = [Answered("k", "Review the paper.", "The paper.", ANSWER)]
    with OpenAIServer(lambda body: "3\n</rating>", chat_logprobs=scripted, refuse_logprobs=403) as server:
        cand = candidate(server)
        ratings, method, extra = rate_answers(answers, make_lm(cand, tmp_path), cand, SCALE)
        assert (ratings, method, len(extra)) == ({"k": 3.0}, {"k": "asked:openai/gpt-test"}, 1)
        plain = candidate(server, continue_final_message=False)
        assert rate_answers(answers, make_lm(plain, tmp_path / "b"), plain, SCALE)[:2] == ({"k": None}, {"k": "answer"})


def test_a_stated_rating_is_kept_and_only_the_others_are_read(tmp_path):
    answers = [Answered("tagged", "Review the paper.", "The paper.", STATED),
               Answered("inline", "Review the paper.", "The paper.", "## Review\n\nSound work.\n\n**Overall score:** 4/5\n"),
               Answered("silent", "Review the paper.", "The paper.", ANSWER)]
    with OpenAIServer(lambda body: "3\n</rating>", chat_logprobs=scripted, refuse_logprobs=403) as server:
        cand = candidate(server)
        ratings, methods, extra = rate_answers(answers, make_lm(cand, tmp_path), cand, SCALE)
        # 4 of 1..5 lies at 7.75 of 1..10: the nearest common point is 8
        assert ratings == {"tagged": 5.0, "inline": 8.0, "silent": 3.0}
        assert methods == {"tagged": "stated", "inline": "stated", "silent": "asked:openai/gpt-test"}
        # only the silent review was asked (a refused logprobs request, then its continuation)
        assert len(extra) == 1 and {r["messages"][-1]["content"] for r in server.received} == {ANSWER}


def test_stated_ratings_on_the_common_scale():
    assert stated_rating("Rating: 6: marginally above the acceptance threshold", SCALE) == 6.0
    assert stated_rating("<rating>\n7\n</rating>", SCALE) == 6.0              # off the scale: nearest, ties lower
    assert stated_rating("Recommendation = 2 out of 4", SCALE) == 3.0           # 4.0 of 1..10
    assert stated_rating("We score 0.8 on ImageNet. Rating: 12", SCALE) is None   # above the scale
    assert stated_rating("The method scores well; rating it is hard.", SCALE) is None
    assert stated_rating("Score: 3/10\n...\nFinal rating: 8/10", SCALE) == 8.0    # the last statement wins
    assert on_common_scale(0.0, 5.0, SCALE) == 1.0 and on_common_scale(6.0, 5.0, SCALE) is None
