"""The LM layer without a model: batching, the device policy, what a backend cannot do, the imports."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tasks.core.config import LLMConfig, PreprocessConfig, ScoreConfig
from tasks.core.errors import ConfigError
from tasks.lm import (
    CachedLM,
    ChatRequest,
    LLMCache,
    LoglikelihoodRequest,
    ModelSpec,
    Unsupported,
    batches,
    chat_spec,
    cuda_available,
    eval_spec,
    make_lm,
    map_batches,
)
from tasks.lm.anthropic_api import AnthropicLM
from tasks.lm.encoder import Encoder
from tasks.testing.anthropic_server import AnthropicServer

CPU_ONLY = pytest.mark.skipif(cuda_available(), reason="checks the CPU policy")


def test_batches_run_longest_first_under_the_budget():
    lengths = [3, 9, 1, 9, 4, 2]
    got = batches(lengths, cost=lambda n: n, budget=20)
    assert got == [[1, 3], [4, 0, 5, 2]]              # 2 x 9 = 18; then 4 x 4 = 16 (ties keep input order)
    assert all(len(b) * max(lengths[i] for i in b) <= 20 for b in got)
    assert batches([50, 1], cost=lambda n: n, budget=20) == [[0], [1]]   # too big alone: a batch of one
    assert batches(lengths, cost=lambda n: n, max_items=4) == [[1, 3, 4, 0], [5, 2]]
    assert batches([], cost=len) == []


def test_batches_keep_groups_apart_and_follow_a_given_order():
    items = [("a", 5), ("b", 7), ("a", 6), ("b", 1)]
    got = batches(items, cost=lambda x: x[1], key=lambda x: (x[0], -x[1]), group=lambda x: x[0])
    assert got == [[2, 0], [1, 3]]


def test_map_batches_restores_the_input_order():
    texts = ["ccc", "a", "bbbb", "dd", "eeeee"]
    seen: list[list[str]] = []

    def upper(batch: list[str]) -> list[str]:
        seen.append(batch)
        return [t.upper() for t in batch]

    assert map_batches(texts, upper, cost=len, budget=8) == [t.upper() for t in texts]
    assert seen[0] == ["eeeee"] and [len(t) for b in seen for t in b] == sorted(map(len, texts), reverse=True)
    with pytest.raises(RuntimeError, match="answered 0 of"):
        map_batches(texts, lambda batch: [], cost=len)


@CPU_ONLY
def test_one_device_policy():
    assert ModelSpec().resolved() == ModelSpec(dtype="float32", quantization="none", device="cpu")
    assert ModelSpec(quantization="auto").resolved().key == "smollm2|float32|none"
    with pytest.raises(ValueError, match="needs CUDA"):
        ModelSpec(quantization="nf4").resolved()
    assert eval_spec(ScoreConfig()).resolved().key == "smollm2|float32|none"
    assert chat_spec(PreprocessConfig(model="some/model")) == ModelSpec("some/model")
    with pytest.raises(ValueError, match="needs CUDA"):
        chat_spec(PreprocessConfig(load_in_4bit=True))


def test_backends_say_what_they_cannot_do(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "fake-test-key-lm-layer")
    cfg = LLMConfig(backend="anthropic", model="claude-test", use_batches=False)
    with AnthropicServer() as server:
        lm = make_lm(cfg, tmp_path, base_url=server.url)
        assert isinstance(lm.inner, AnthropicLM) and lm.inner.batch_store is lm.cache   # the store, given when built
        assert lm.generate([ChatRequest("sys", "<review>\nThe results are convincing and well presented.\n</review>", 64)])[0].ok
        with pytest.raises(Unsupported, match="no log-probabilities"):
            lm.loglikelihood([LoglikelihoodRequest("sys", "user", "answer")])
        with pytest.raises(Unsupported, match="no embedding"):
            lm.embed(["text"])
    encoder = CachedLM(Encoder(), LLMCache(tmp_path / "other.sqlite"), cfg)    # any backend, no type checks
    with pytest.raises(Unsupported, match="cannot generate"):
        encoder.generate([ChatRequest("sys", "user", 8)])
    with pytest.raises(Unsupported, match="no log-likelihoods"):
        encoder.loglikelihood([LoglikelihoodRequest("sys", "user", "answer")])


def test_the_layer_imports_no_model_code():
    code = ("import sys, tasks.lm, tasks.scoring.shards, tasks.metrics; "
            "print(sorted(m for m in ('torch', 'transformers', 'tasks.lm.local', 'tasks.lm.anthropic_api') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_backends_are_looked_up_by_name_and_the_config_names_them():
    from typing import get_args

    from tasks.core.config import BackendName
    from tasks.lm import BACKENDS, backend_name
    from tasks.lm.backends import backend_class
    from tasks.lm.completions import CompletionsLM
    from tasks.lm.local import LocalLM
    from tasks.lm.openai_api import OpenAILM

    assert set(get_args(BackendName)) | {"completions"} == set(BACKENDS)
    assert backend_name(LLMConfig()) == "local"
    assert backend_name(LLMConfig(backend="openai", model="m")) == "openai"
    assert backend_name(LLMConfig(backend="openai", model="m", api="completions")) == "completions"
    assert [backend_class(n) for n in ("local", "anthropic", "openai", "completions")] == \
        [LocalLM, AnthropicLM, OpenAILM, CompletionsLM]
    with pytest.raises(ConfigError) as error:
        backend_class("llama")
    assert str(error.value) == "backend 'llama': not one of anthropic, completions, local, openai"


def test_a_stage_asks_whether_a_model_runs_locally():
    from tasks.lm import local_spec, runs_locally

    local = LLMConfig(model="smollm2", dtype="float32")
    assert runs_locally(local) and local_spec(local) == chat_spec(local)
    for api in (LLMConfig(backend="anthropic", model="claude"), LLMConfig(backend="openai", model="gpt"),
                LLMConfig(backend="openai", base_url="served:smollm2")):   # a local model behind a server: an API
        assert not runs_locally(api) and local_spec(api) is None


def test_a_base_url_of_an_in_process_server_is_known_by_no_scheme_name(monkeypatch):
    from tasks.lm import backends, register_base_url_scheme, resolve_base_url
    from tasks.lm.backends import in_process_model
    from tasks.lm.openai_api import served_key

    assert in_process_model("https://api.openai.com/v1") is None and in_process_model(None) is None
    assert in_process_model("served:smollm2") == "smollm2" and in_process_model("sim:tiny") == "tiny"
    from tasks.lm.backends import served_options
    assert served_options("smollm2") == ("smollm2", "none")
    assert served_options("smollm2?quantization=int8") == ("smollm2", "int8")
    for bad in ("smollm2?quantization=int4", "smollm2?dtype=float16", "?quantization=int8"):
        with pytest.raises(ValueError, match="a served model is a name"):
            served_options(bad)
    assert served_key(LLMConfig(backend="openai", base_url="sim:smollm2")) == "sim:" + ModelSpec().resolved().key
    with pytest.raises(ConfigError, match="unknown scheme 'nowhere'"):
        resolve_base_url("nowhere:smollm2")
    monkeypatch.setattr(backends, "_BASE_URL_SCHEMES", {})
    register_base_url_scheme("echo-test", lambda name: f"http://127.0.0.1:9/{name}")
    assert resolve_base_url("echo-test:m") == "http://127.0.0.1:9/m"
    assert resolve_base_url("https://example.org/v1") is None   # used as configured
