"""Top next tokens through a chat API (OpenAI's `logprobs` / `top_logprobs`), with the real `openai` client
against the local server: the response's shape and the 20 cap, a model that refuses logprobs, the rating
read from the list (tasks/lm/readout.py `top_ratings`) checked by hand, and the cache."""

from __future__ import annotations

import math

import openai
import pytest

from tasks.lm import Unsupported, make_lm
from tasks.lm.readout import top_ratings
from tasks.lm.types import ChatRequest
from tasks.testing.openai_server import OpenAIServer
from tests.chat_api_data import OPENAI_ENV as ENV
from tests.chat_api_data import OPENAI_KEY as KEY
from tests.chat_api_data import openai_config as config
from tests.chat_api_data import openai_lm as make

SYSTEM, USER = "Rate the review from 0 to 10.", "The review says the proofs are incomplete."
# the next tokens after each answer so far: "10" is split into "1", "0" (as SmolLM2 spells it)
TABLES = {"Score: ": [("7", 0.5), ("1", 0.2), (" 8", 0.1), (" ", 0.05), ("Score", 0.01)],
          "Score: 1": [("0", 0.6), ("\n", 0.3)]}


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(ENV, KEY)
    return KEY


def scripted(body: dict) -> tuple[str, list[dict], int, int]:
    """A model whose next tokens after the continued answer are TABLES' (one token: the most likely)."""
    written = body["messages"][-1]["content"] if body.get("continue_final_message") else ""
    top = [{"token": t, "logprob": math.log(p), "bytes": list(t.encode())}
           for t, p in TABLES[written][: body.get("top_logprobs") or 0]]
    return top[0]["token"], [{**top[0], "top_logprobs": top}], 10, 1


def asked_prefill(body: dict) -> tuple[str, list[dict], int, int]:
    """A model without continue_final_message that writes the asked "Score: " first, then TABLES' token."""
    tokens = [(t, {"token": t, "logprob": -0.01, "bytes": [], "top_logprobs": []}) for t in ("Score", ":", " ")]
    top = [{"token": t, "logprob": math.log(p), "bytes": []} for t, p in TABLES["Score: "]]
    content = [c for _, c in tokens] + [{**top[0], "top_logprobs": top}]
    return "Score: 7", content, 10, len(content)


def by_hand() -> float:
    """p(10) = p("1") p("0" | "1"); 1 keeps p("1") less p(10); " 8" is 8; normalised over the scale seen."""
    mass = {7: 0.5, 8: 0.1, 10: 0.2 * 0.6, 1: 0.2 - 0.2 * 0.6}
    return sum(k * v for k, v in mass.items()) / sum(mass.values())


def test_the_response_has_openai_shape_and_top_logprobs_is_capped_at_20():
    with OpenAIServer(chat_logprobs=scripted) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key=KEY, max_retries=0)
        answer = client.chat.completions.create(
            model="gpt-test", max_tokens=1, logprobs=True, top_logprobs=3,
            messages=[{"role": "user", "content": USER}, {"role": "assistant", "content": "Score: "}],
            extra_body={"continue_final_message": True})
        first = answer.choices[0].logprobs.content[0]
        assert first.token == "7" and [t.token for t in first.top_logprobs] == ["7", "1", " 8"]
        assert first.top_logprobs[1].logprob == pytest.approx(math.log(0.2)) and first.bytes == [55]
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="gpt-test", max_tokens=1, logprobs=True, top_logprobs=21,
                                           messages=[{"role": "user", "content": USER}])
        assert refused.value.status_code == 400 and "Expected a value <= 20, but got 21" in str(refused.value)
        assert refused.value.body["param"] == "top_logprobs"


def test_the_rating_is_the_expectation_by_hand_and_a_rerun_is_cached(tmp_path):
    with OpenAIServer(chat_logprobs=scripted) as server:
        lm = make_lm(config(server, continue_final_message=True), tmp_path)
        (read,) = top_ratings(lm, [(SYSTEM, USER)], "Score:", range(11))
        assert read is not None and read.expected == pytest.approx(by_hand())
        assert read.mass == pytest.approx(0.8) and read.seen == pytest.approx(0.86)
        assert sum(read.probabilities) == pytest.approx(1.0)
        body = server.received[0]
        assert body["logprobs"] is True and body["top_logprobs"] == 20 and body["max_tokens"] == 1
        assert [b["messages"][-1]["content"] for b in server.received] == ["Score: ", "Score: 1"]   # "10" split
        calls = server.counts["chat"]
        (again,) = top_ratings(make_lm(config(server, continue_final_message=True), tmp_path),
                               [(SYSTEM, USER)], "Score:", range(11))
        assert server.counts["chat"] == calls and again == read


def test_without_continuing_the_position_is_found_after_the_asked_prefill():
    with OpenAIServer(chat_logprobs=asked_prefill) as server:
        (got,) = make(server).top_logprobs([ChatRequest(SYSTEM, USER, 8, prefill="Score: ")])
    assert got.error is None and got.alternatives[0] == ("7", pytest.approx(math.log(0.5)))
    assert "Begin your answer with exactly: Score: " in server.received[0]["messages"][1]["content"]
    with OpenAIServer(chat_logprobs=asked_prefill) as server, pytest.raises(Unsupported, match="continue"):
        make(server).top_logprobs([ChatRequest(SYSTEM, USER, 8, prefill="x" * 200)])   # a whole review: no
    assert server.counts["chat"] == 0


@pytest.mark.parametrize("status", [403, 400])
def test_a_model_that_refuses_logprobs_is_unsupported_once_and_still_chats(status):
    with OpenAIServer(chat_logprobs=scripted, refuse_logprobs=status) as server:
        lm = make(server)
        with pytest.raises(Unsupported, match="refused logprobs"):
            lm.top_logprobs([ChatRequest(SYSTEM, USER, 8, prefill="Score: ")])
        with pytest.raises(Unsupported):
            lm.top_logprobs([])    # remembered: no request
        assert server.counts["chat"] == 1
        assert lm.generate([ChatRequest(SYSTEM, USER, 20)])[0].error is None   # a 403 here is no refused key


def test_a_server_that_ignores_logprobs_is_unsupported():
    with OpenAIServer() as server, pytest.raises(Unsupported, match="without logprobs"):
        make(server).top_logprobs([ChatRequest(SYSTEM, USER, 8, prefill="Score: ")])


@pytest.mark.slow
def test_the_local_server_keeps_the_last_prefix_and_reads_the_same_top_tokens(embedded_lm):
    """The embedded model behind chat logprobs: a request that continues the one before computes only
    its new tokens (prefix caching, as vLLM does) and shows the same top 20 as a server without that
    prefix, to float32 noise; a request that shares nothing starts afresh."""
    from tasks.lm.loading import chat_ids, common_prefix
    from tasks.testing.completions import LocalChatLogprobs

    def body(written: str, user: str = USER) -> dict:
        return {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user},
                             {"role": "assistant", "content": written}],
                "continue_final_message": True, "top_logprobs": 20, "max_tokens": 3}
    kept = LocalChatLogprobs("smollm2")
    first = kept(body("Score: "))
    computed = kept.computed
    second = kept(body("Score: 1"))
    fresh = LocalChatLogprobs("smollm2")(body("Score: 1"))
    assert kept.reused >= first[2] - 2 and kept.computed - computed < 8   # its prompt bar the answer's start
    assert second[0] == fresh[0] and second[2:] == fresh[2:]
    for mine, theirs in zip(second[1], fresh[1], strict=True):
        assert [t["token"] for t in mine["top_logprobs"]] == [t["token"] for t in theirs["top_logprobs"]]
        assert max(abs(a["logprob"] - b["logprob"]) for a, b in zip(mine["top_logprobs"], theirs["top_logprobs"],
                                                                       strict=True)) < 1e-4
    reused, other = kept.reused, "An unrelated paper on proteins."
    kept(body("Score: ", user=other))
    tokenizer = embedded_lm[1]
    shared = common_prefix([chat_ids(tokenizer, SYSTEM, USER, "Score: 1"), chat_ids(tokenizer, SYSTEM, other, "Score: ")])
    assert kept.reused - reused == shared < first[2] - 10   # the template's head and the system prompt only


@pytest.mark.slow
def test_a_rating_read_after_the_review_it_rates_computes_only_the_rating_question(embedded_lm):
    """The server's batch generates a review on the float weights and keeps its KV (as vLLM's prefix
    caching keeps a finished sequence's blocks); the rating's logprobs request that follows reads the
    prompt and the review from it and computes only what follows, and its top 20 is the one a server
    without the generated sequence shows, to float32 noise."""
    from tasks.lm import ModelSpec, load_model
    from tasks.lm.decode import finished_sequences
    from tasks.lm.loading import chat_ids
    from tasks.testing.completions import LocalChatLogprobs
    from tasks.testing.openai_server import local_model_batch_responder

    asked = {"messages": [{"role": "system", "content": "Review the paper in two sentences."},
                          {"role": "user", "content": "A paper proving that every planar graph is 4-colourable "
                                                      "with a shorter computer check."}], "max_tokens": 40}
    answer = local_model_batch_responder("smollm2")([asked])[0][0]

    def rating(reader: LocalChatLogprobs) -> tuple:
        return reader({"messages": [*asked["messages"], {"role": "assistant", "content": f"{answer}\n<rating>\n"}],
                       "continue_final_message": True, "top_logprobs": 20, "max_tokens": 1})
    model = load_model(ModelSpec(name="smollm2"))[0]
    if (kept := finished_sequences(model)) is not None:
        kept.clear()
    fresh = LocalChatLogprobs("smollm2")
    expected = rating(fresh)
    assert fresh.reused == 0

    assert local_model_batch_responder("smollm2", keep=True)([asked])[0][0] == answer
    reader = LocalChatLogprobs("smollm2")
    read = rating(reader)
    prompt = len(chat_ids(embedded_lm[1], asked["messages"][0]["content"], asked["messages"][1]["content"]))
    assert reader.reused > prompt + 20 and reader.computed < 12    # the review's tokens came with it
    assert [t["token"] for t in read[1][0]["top_logprobs"]] == [t["token"] for t in expected[1][0]["top_logprobs"]]
    assert max(abs(a["logprob"] - b["logprob"]) for a, b in zip(read[1][0]["top_logprobs"],
                                                                expected[1][0]["top_logprobs"], strict=True)) < 1e-4
