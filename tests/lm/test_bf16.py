"""bfloat16 where the hardware has it (tasks/lm/loading.py `fast_dtype`): the "auto" policy, the keys
that keep float32 and bfloat16 results apart, and the engine, the readout and the drafted decoder
running in bfloat16 on small models built from a configuration (random weights: shapes and paths,
no quality claims)."""

from __future__ import annotations

import pytest
import torch

from tasks.core.config import LLMConfig, PreprocessConfig, ScoreConfig
from tasks.lm import ChatRequest, ModelSpec, chat_spec, eval_spec, request_key
from tasks.lm.cpu import cpu_has_bf16
from tasks.lm.loading import cuda_available
from tests.lm.test_lm_drafts import PIECES, prompts

CPU_ONLY = pytest.mark.skipif(cuda_available(), reason="checks the CPU policy")
AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma f16c\nprocessor\t: 1\nflags\t\t: fpu sse2 avx avx2\n"
SAPPHIRE = "flags\t\t: fpu avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile\n"
ZEN4 = "flags\t\t: fpu avx2 avx512f avx512bw avx512_bf16\n"


def test_bf16_units_are_read_from_the_cpu_flags(monkeypatch) -> None:
    assert not cpu_has_bf16(AVX2)
    assert cpu_has_bf16(SAPPHIRE) and cpu_has_bf16(ZEN4)
    assert not cpu_has_bf16("")                                   # no /proc/cpuinfo: float32
    assert not cpu_has_bf16("model name : avx512_bf16 in a name\n")   # only the flags line counts
    monkeypatch.setenv("GREBENCH_CPU_BF16", "1")
    assert cpu_has_bf16()
    monkeypatch.setenv("GREBENCH_CPU_BF16", "0")
    assert not cpu_has_bf16()
    monkeypatch.setenv("GREBENCH_CPU_BF16", "yes")
    with pytest.raises(ValueError, match="must be 0 or 1"):
        cpu_has_bf16()


@CPU_ONLY
def test_auto_is_bfloat16_on_a_cpu_with_bf16_units_and_the_keys_say_so(monkeypatch) -> None:
    from tasks.lm.local import LocalLM
    from tasks.lm.openai_api import served_key

    monkeypatch.setenv("GREBENCH_CPU_BF16", "1")
    assert ModelSpec().resolved().key == "smollm2|bfloat16|none"
    assert eval_spec(ScoreConfig()).resolved().key == "smollm2|bfloat16|none"
    assert chat_spec(PreprocessConfig()).resolved().dtype == "bfloat16"
    assert ModelSpec(dtype="float32").resolved().key == "smollm2|float32|none"    # a pinned dtype stays
    assert chat_spec(PreprocessConfig(dtype="float32")).resolved().dtype == "float32"
    bf16 = LocalLM(chat_spec(PreprocessConfig()))
    served = served_key(LLMConfig(backend="openai", base_url="served:smollm2"))
    monkeypatch.setenv("GREBENCH_CPU_BF16", "0")
    assert ModelSpec().resolved().key == "smollm2|float32|none"
    f32 = LocalLM(chat_spec(PreprocessConfig()))
    request = ChatRequest("system", "user", 16)
    assert bf16.identity != f32.identity and "bfloat16" in bf16.identity and "float32" in f32.identity
    assert request_key(bf16.identity, request) != request_key(f32.identity, request)   # answers never mix
    assert served == "served:smollm2|bfloat16|none"
    assert served_key(LLMConfig(backend="openai", base_url="served:smollm2")) == "served:smollm2|float32|none"
    # the demo's served candidate decodes in int8: its answers are keyed apart from the float model's
    assert served_key(LLMConfig(backend="openai", base_url="served:smollm2?quantization=int8")) == \
        "served:smollm2|float32|int8"
    with pytest.raises(ValueError):
        LLMConfig(dtype="int8")


@pytest.fixture
def one_thread():
    """One torch thread: a tiny model's steps are all overhead, and on a busy machine a second
    thread turns each into a wait (20x slower here)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
def test_the_drafted_decoder_in_bfloat16_answers_like_transformers_generate(one_thread) -> None:
    """Greedy answers of the fast decoder (one token a step, and with drafts) against transformers'
    own bfloat16 `generate` on a left-padded batch, token for token, for three random tiny models."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from tasks.lm.decode import GreedyDecoder

    config = LlamaConfig(vocab_size=len(PIECES), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         attn_implementation="sdpa")
    limits, pad = [40, 25, 60, 33], 1
    batch = prompts()
    width = max(map(len, batch))
    ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in batch])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
    for seed in range(3):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max(limits), do_sample=False,
                                 pad_token_id=pad, eos_token_id=0)
        reference = []
        for row, limit in zip(out[:, width:].tolist(), limits, strict=True):
            row = row[:limit]
            reference.append(row[: row.index(0) + 1] if 0 in row else row)
        for drafts in (0, 4):
            decoder = GreedyDecoder(model, draft_tokens=drafts)
            assert decoder.generate(batch, limits, {0}) == reference, (seed, drafts)
        assert next(model.parameters()).dtype == torch.bfloat16


def test_engine_and_readout_in_bfloat16_keep_float32_log_probabilities(tmp_path, one_thread) -> None:
    """The log-likelihood engine (prefix sharing, packed rows) and the readout on a bfloat16 model:
    the float32 log_softmax of the model's own bfloat16 logits, as a plain full forward gives them."""
    from tasks.lm import LoglikelihoodRequest
    from tasks.lm.local import LocalLM
    from tasks.lm.loglikelihood import reference_score
    from tasks.lm.readout import answer_probabilities
    from tests.metrics.test_qualify_readout_panel import tiny_lm

    folder = tiny_lm(tmp_path / "tiny", 0)
    lm = LocalLM(ModelSpec(folder, dtype="bfloat16"), token_budget=256)
    model, tokenizer = lm.engine.model, lm.engine.tokenizer
    assert model.dtype == torch.bfloat16
    system = "the review point is tested"
    users = ["the model is tested on data", "the model is tested on more data which is missing",
             "ablation missing"]
    answers = ["the ablation is missing", "same point", "the data is more informative"]
    requests = [LoglikelihoodRequest(system, u, a) for u in users for a in answers]
    got, want = lm.loglikelihood(requests), reference_score(model, tokenizer, requests)
    for g, w in zip(got, want, strict=True):
        assert g.n_tokens == w.n_tokens
        assert max(abs(x - y) for x, y in zip(g.token_logprobs, w.token_logprobs, strict=True)) < 0.05
    # sums over float32 values, not bfloat16-rounded ones
    assert any(float(torch.tensor(v).bfloat16()) != v for r in got for v in r.token_logprobs)
    probs = answer_probabilities(lm, [(system, u) for u in users], ["the", "same"])
    firsts = [[r.token_logprobs[0] for r in want[i * 3: i * 3 + 2]] for i in range(3)]
    assert probs == pytest.approx(torch.tensor(firsts).double().exp().numpy(), rel=0.05)


def test_the_bfloat16_head_adds_its_targets_logits_in_float32() -> None:
    """A bfloat16 head rounds every logit (by up to 0.06 where they reach 20); the engine recomputes each
    target's logit in float32, so against the same weights in float32 arithmetic its log-probabilities
    carry the rounding of the normalizer only: for targets drawn as text draws them (likely tokens, not
    always the likeliest), their error is clearly smaller."""
    from types import SimpleNamespace

    from tasks.lm.loglikelihood import LoglikelihoodEngine

    torch.manual_seed(0)
    head = torch.nn.Linear(64, 2000, bias=False)
    with torch.no_grad():
        head.weight.mul_(12.0)
    head = head.bfloat16()
    rows = torch.randn(512, 64).bfloat16()
    exact_logits = rows.float() @ head.weight.float().t()
    targets = torch.multinomial(exact_logits.softmax(-1), 1).squeeze(1)   # drawn as text is: likely tokens
    truth = exact_logits.log_softmax(-1).gather(1, targets[:, None]).squeeze(1)
    plain = head(rows).float().log_softmax(-1).gather(1, targets[:, None]).squeeze(1)
    engine = LoglikelihoodEngine._head_logprobs(SimpleNamespace(lm_head=head), rows, targets)
    engine_error, plain_error = (engine - truth).abs().mean(), (plain - truth).abs().mean()
    assert engine_error < 0.8 * plain_error, (engine_error, plain_error)
    fp32 = head.float()
    assert torch.equal(LoglikelihoodEngine._head_logprobs(SimpleNamespace(lm_head=fp32), rows.float(), targets),
                       fp32(rows.float()).log_softmax(-1).gather(1, targets[:, None]).squeeze(1))   # float32: as before


def test_without_bf16_units_a_bfloat16_model_multiplies_in_float32_as_bf16_units_do(tmp_path, monkeypatch,
                                                                                    one_thread) -> None:
    """On a CPU without bf16 units the loader widens a bfloat16 model (tasks/lm/wide_bf16.py): each linear
    layer is the float32 product of its bfloat16 values, rounded once, which is torch's bfloat16 matmul up to
    the order of its float32 sums; the parameters stay the model's own (a tied head stays tied); with bf16 units, or torch's matmul
    asked for, the layers are torch's own."""
    from tasks.lm import loading, wide_bf16
    from tests.metrics.test_qualify_readout_panel import tiny_lm

    folder = tiny_lm(tmp_path / "tiny", 0)

    def loaded(dtype: str = "bfloat16", **env: str) -> torch.nn.Module:
        """A fresh load as `load_model` makes it, past its cache of loaded models (which keeps the session's)."""
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        return loading._load(ModelSpec(folder, dtype=dtype).resolved())[0]

    def widened(model: torch.nn.Module) -> list[bool]:
        return [getattr(vars(m).get("forward"), "func", None) is wide_bf16.wide_linear
                for m in model.modules() if type(m) is torch.nn.Linear]

    model = loaded(GREBENCH_CPU_BF16="0")
    assert all(widened(model)) and len(widened(model)) > 4
    layer = model.get_output_embeddings()
    assert layer.weight.dtype == torch.bfloat16 and not layer.wide_weight.requires_grad
    torch.manual_seed(0)
    rows = torch.randn(9, layer.in_features).bfloat16()
    with torch.inference_mode():
        wide, own = layer(rows), torch.nn.functional.linear(rows, layer.weight)
    assert wide.dtype == torch.bfloat16
    assert torch.equal(wide, (rows.float() @ layer.weight.float().T).bfloat16())
    assert torch.allclose(wide.float(), own.float(), rtol=2 ** -7, atol=1e-5)     # one bfloat16 rounding apart
    ids = torch.randint(0, layer.out_features, (1, 40))
    with torch.inference_mode():
        first = model(input_ids=ids).logits.float().log_softmax(-1)
        wide_bf16.narrow(model)
        assert not any(widened(model)) and not hasattr(layer, "wide_weight")
        second = model(input_ids=ids).logits.float().log_softmax(-1)
    assert (first - second).abs().max() < 0.1
    parameters = [id(p) for p in model.parameters()]
    assert wide_bf16.widen(model) == len(widened(model)) and wide_bf16.widen(model) == 0
    assert [id(p) for p in model.parameters()] == parameters     # the same parameters: a tied head stays tied
    assert not any(widened(loaded(GREBENCH_CPU_BF16="1")))                        # bf16 units: torch's own
    assert not any(widened(loaded(GREBENCH_CPU_BF16="0", GREBENCH_BF16_MATMUL="torch")))
    assert not any(widened(loaded("float32", GREBENCH_BF16_MATMUL="float32")))   # only bfloat16 layers
    monkeypatch.setenv("GREBENCH_BF16_MATMUL", "fast")
    with pytest.raises(ValueError, match="float32 or torch"):
        wide_bf16.wanted()

