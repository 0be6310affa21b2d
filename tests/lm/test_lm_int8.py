"""torch's dynamic int8 for the generating roles on a CPU (tasks/lm/loading.py `quantize_int8`)."""

from __future__ import annotations

import pytest
import torch

from tasks.core.config import LLMConfig
from tasks.lm import ChatRequest, LoglikelihoodRequest, ModelSpec
from tasks.lm.loading import chat_spec
from tasks.lm.local import LocalLM
from tasks.lm.loglikelihood import LoglikelihoodEngine


def test_int8_is_asked_for_by_name_and_named_in_every_key() -> None:
    spec = chat_spec(LLMConfig(quantization="int8"))
    assert spec.resolved().key == "smollm2|float32|int8"      # float32 around the int8 layers, whatever the CPU
    assert chat_spec(LLMConfig()).resolved().key != spec.resolved().key
    assert chat_spec(LLMConfig(quantization="int8", dtype="bfloat16")).resolved().dtype == "float32"
    # torch's dynamic int8 has CPU kernels only: on a GPU the same config runs the plain model
    on_gpu = ModelSpec(quantization="int8", dtype="bfloat16", device="cuda").resolved()
    assert (on_gpu.quantization, on_gpu.dtype) == ("none", "bfloat16")


def test_quantization_settings_that_cannot_run_here_fail_in_one_line() -> None:
    with pytest.raises(ValueError, match="disagree"):
        chat_spec(LLMConfig(load_in_4bit=True, quantization="int8"))
    with pytest.raises(ValueError, match="needs CUDA"):
        chat_spec(LLMConfig(quantization="nf4"))


@pytest.mark.slow
def test_an_int8_model_generates_and_its_log_likelihoods_come_from_the_float_model() -> None:
    lm = LocalLM(ModelSpec(quantization="int8"))
    model, tokenizer = lm._loaded()
    assert not [m for m in model.modules() if type(m) is torch.nn.Linear]   # every linear layer, the head too
    requests = [ChatRequest("You review papers.", f"Say one thing about paper {i} on graphs.", 24) for i in range(3)]
    first, again = lm.generate(requests), lm.generate(requests)
    assert all(r.ok and 0 < r.output_tokens <= 24 for r in first)
    assert [r.text for r in again] == [r.text for r in first]   # the same batch, the same greedy answers
    # log-likelihoods come from the float model of the same weights: one activation scale per int8 batch
    # would make a value depend on its batchmates
    request = LoglikelihoodRequest("You review papers.", "Rate the paper from 1 to 10.", "The rating is 6.")
    float_lm = LocalLM(ModelSpec())
    assert lm.loglikelihood([request]) == float_lm.loglikelihood([request])
    with pytest.raises(NotImplementedError, match="int8"):
        LoglikelihoodEngine(model, tokenizer)


@pytest.mark.slow
def test_candidates_generating_side_by_side_leave_the_model_answering_as_before(monkeypatch) -> None:
    """Two candidates on one int8 model, each in its own thread on half the cores, then the same model in
    the main thread: its greedy answers are those it gave before the section (a worker thread once left
    torch's process-wide count at one thread, and later stages answered as if on one core)."""
    import threading

    from tasks.lm.local import sharing_cores

    monkeypatch.setenv("GREBENCH_LOCAL_THREADS", "2")
    spec = ModelSpec(quantization="int8")
    topics = ["graph neural networks for molecules", "sparse attention for long documents",
              "a benchmark of tabular learners", "contrastive pretraining of speech models"]
    reviews = [ChatRequest("You write a short peer review.", f"Review a paper on {t}: the method, the experiments, "
                           "the baselines and what is missing.", 40) for t in topics]
    probe = [ChatRequest("You list weaknesses, one per line.", f"A paper proposes {t} and tests it on two small "
                         "datasets without ablations.", 32) for t in topics]
    before = [r.text for r in LocalLM(spec).generate(probe)]
    with sharing_cores(2):
        pair = [threading.Thread(target=LocalLM(spec).generate, args=(reviews[i::2],)) for i in range(2)]
        for worker in pair:
            worker.start()
        for worker in pair:
            worker.join()
    assert [r.text for r in LocalLM(spec).generate(probe)] == before


def test_int8_models_are_released_once_nothing_left_decodes(tmp_path) -> None:
    """After a run's last decoding stage the int8 model goes (flows/pipeline.py): the float model
    that scores stays loaded, and the int8 one's memory is free (nothing else holds it)."""
    import gc
    import weakref

    from tasks.lm import local_lm, release_decoding_models
    from tasks.lm.loading import load_model, loaded_specs
    from tests.tiny_models import tiny_llama

    folder = tiny_llama(tmp_path / "tiny", ["[UNK]", "<|end|>", "a", "b", "c"])
    decoding, scoring = ModelSpec(folder, quantization="int8"), ModelSpec(folder, dtype="float32")
    decoder = LocalLM(decoding)
    assert decoder.generate([ChatRequest("", "a b", 4)])[0].ok
    held = weakref.ref(load_model(decoding)[0])
    scorer = load_model(scoring)[0]
    local_lm(decoding)
    assert {decoding.resolved(), scoring.resolved()} <= set(loaded_specs())
    del decoder
    assert decoding.resolved() in release_decoding_models()   # (and any other int8 model this process held)
    gc.collect()
    assert held() is None
    assert scoring.resolved() in loaded_specs() and load_model(scoring)[0] is scorer
    assert decoding.resolved() not in loaded_specs()
    assert LocalLM(decoding).generate([ChatRequest("", "a b", 4)])[0].ok   # loaded again when asked


def test_engines_and_their_prefix_caches_go_between_stages_the_weights_stay(tmp_path) -> None:
    import gc
    import weakref

    from tasks.lm import LoglikelihoodRequest, local_lm, release_engines
    from tasks.lm.loading import load_model
    from tests.tiny_models import tiny_llama

    folder = tiny_llama(tmp_path / "tiny", ["[UNK]", "<|end|>", "a", "b", "c"])
    spec = ModelSpec(folder, dtype="float32")
    lm = local_lm(spec)
    first = lm.loglikelihood([LoglikelihoodRequest("a", "b a", "c b")])
    engine = weakref.ref(lm.engine)
    weights = load_model(spec)[0]
    del lm
    assert release_engines() >= 1
    gc.collect()
    assert engine() is None                       # the engine and its prefix caches are gone
    assert load_model(spec)[0] is weights          # the weights are not
    assert local_lm(spec).loglikelihood([LoglikelihoodRequest("a", "b a", "c b")]) == first


@pytest.mark.slow
def test_a_batch_invariant_model_answers_a_prompt_the_same_whatever_came_before_it(monkeypatch) -> None:
    """`batch_invariant`: an answer depends on its prompt only. A run killed and resumed asks what is left
    in other company, after other calls: batched int8 scales a batch's activations together and a kept
    prompt head splits a later prompt's prefill, so the same prompt could decode to other greedy text."""
    from tasks.lm import loading

    # the process's loaded models as this test found them afterwards: the session's shared model stays loaded
    before = set(loading.loaded_specs())
    monkeypatch.setattr(loading, "KEEP_LOADED", loading.KEEP_LOADED + 1)
    try:
        _decode_in_company_and_alone()
    finally:
        loading.release_models(lambda spec: spec not in before)


def _decode_in_company_and_alone() -> None:
    requests = [ChatRequest("You review papers.", f"Say one thing about paper {i} on graphs.", 24) for i in range(4)]
    together = LocalLM(ModelSpec(quantization="int8"), batch_size=4, batch_invariant=True)
    assert together.batch_size == 1
    in_company = together.generate(requests)
    for order in ([3, 1], [2, 0]):   # a fresh process would start with nothing kept: so does a new LocalLM
        alone = LocalLM(ModelSpec(quantization="int8"), batch_size=4, batch_invariant=True)
        answers = [alone.generate([requests[i]])[0].text for i in order]
        assert answers == [in_company[i].text for i in order]
    assert together._greedy is not None and not together._greedy._heads   # nothing kept between calls
