"""One GPU per worker: the device a process pins its models to, and how NF4 is placed (run without a GPU:
the CUDA paths are checked by what they would ask torch and transformers for)."""

from __future__ import annotations

import types

import pytest

from tasks.lm import loading
from tasks.lm.devices import DEVICE_ENV, device_index, pinned, visible_devices, where_this_runs
from tasks.lm.loading import ModelSpec, nf4_device_map


def test_cuda_is_pinned_to_this_processs_own_gpu(monkeypatch) -> None:
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    assert pinned("cuda") == "cuda:0" and pinned("cpu") == "cpu" and pinned("cuda:5") == "cuda:5"
    monkeypatch.setenv(DEVICE_ENV, "3")
    assert pinned("cuda") == "cuda:3" and device_index(pinned("cuda")) == 3
    monkeypatch.setenv(DEVICE_ENV, "gpu3")
    with pytest.raises(ValueError, match="not a GPU index"):
        pinned("cuda")
    with pytest.raises(ValueError, match="not a pinned CUDA device"):
        device_index("cpu")


def test_a_resolved_cuda_spec_names_one_device_and_nf4_stays_on_it(monkeypatch) -> None:
    monkeypatch.setenv(DEVICE_ENV, "1")
    monkeypatch.setattr(loading, "_CUDA_CHOICES", {})
    monkeypatch.setattr(loading, "cuda_memory", lambda device: (139 * 2**30, 141 * 2**30))
    spec = ModelSpec("some/model", dtype="bfloat16", quantization="auto", device="cuda").resolved()
    assert (spec.device, spec.quantization) == ("cuda:1", "nf4")     # a model whose size is unknown here: NF4
    assert spec.key == "some/model|bfloat16|nf4", "the device is not part of a result's key: GPUs agree"
    assert ModelSpec("m", dtype="bfloat16", quantization="nf4", device="cuda:2").resolved().device == "cuda:2"
    assert nf4_device_map("cuda:2") == {"": 2} and nf4_device_map("cuda") == {"": 1}
    with pytest.raises(ValueError, match="NF4"):
        ModelSpec("m", dtype="float32", quantization="nf4", device="cpu").resolved()


@pytest.mark.parametrize(("quantization", "device"), [("nf4", "cuda:3"), ("none", "cuda:2"), ("none", "cpu")])
def test_load_puts_the_whole_model_on_the_pinned_device(monkeypatch, quantization, device) -> None:
    """What `_load` asks transformers for: NF4 with every module on the spec's one GPU (never "auto"),
    a plain model moved to that device."""
    import transformers

    asked: dict = {}
    moved: list[str] = []
    model = types.SimpleNamespace(to=moved.append, eval=lambda: None)

    def from_pretrained(source, **kwargs):
        asked.update(kwargs)
        return model

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", from_pretrained)
    monkeypatch.setattr(loading, "_source", lambda name: (name, {}))
    monkeypatch.setattr(loading, "load_tokenizer", lambda name: "tokenizer")
    monkeypatch.setattr("tasks.lm.cpu_kernels.fuse", lambda m: None)
    monkeypatch.setattr("tasks.lm.wide_bf16.widen", lambda m: 0)
    spec = ModelSpec("some/model", dtype="bfloat16", quantization=quantization, device=device)
    assert loading._load(spec) == (model, "tokenizer")
    if quantization == "nf4":
        assert asked["device_map"] == {"": 3} and moved == []
        assert asked["quantization_config"].load_in_4bit
    else:
        assert "device_map" not in asked and moved == [device]


def test_visible_devices_and_where_a_job_ran(monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,GPU-9baca7f5")
    assert visible_devices() == ["3", "GPU-9baca7f5"]
    assert where_this_runs("cuda:0")["visible_devices"] == "3,GPU-9baca7f5"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_devices() == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert visible_devices() == []


def test_auto_quantization_is_bf16_where_the_model_fits_and_nf4_where_it_does_not(monkeypatch, tmp_path) -> None:
    """"auto" on a GPU: bf16 weights where the model and the engine's working set fit in the free memory with
    room, NF4 only where they do not (the free memory passed in); the choice is made once per model and GPU and is
    part of the key, so cached scores of the two precisions never mix."""
    from tests.tiny_models import tiny_llama

    folder = str(tiny_llama(tmp_path / "tiny", ["[UNK]", "a", "b", "c"], seed=0))
    parameters = loading.parameter_count(folder)
    assert parameters is not None and parameters > 0
    assert loading.cuda_quantization(parameters, free_bytes=139 * 2**30) == "none"
    assert loading.cuda_quantization(8_000_000_000, free_bytes=139 * 2**30) == "none"     # 8B in bf16: 16 GB
    assert loading.cuda_quantization(8_000_000_000, free_bytes=16 * 2**30) == "nf4"       # no room beside it
    assert loading.cuda_quantization(None, free_bytes=139 * 2**30) == "nf4"               # a size unknown

    monkeypatch.setattr(loading, "_CUDA_CHOICES", {})
    monkeypatch.setattr(loading, "cuda_memory", lambda device: (139 * 2**30, 141 * 2**30))
    roomy = ModelSpec(folder, dtype="bfloat16", quantization="auto", device="cuda:0").resolved()
    assert roomy.quantization == "none" and roomy.key == f"{folder}|bfloat16|none"
    monkeypatch.setattr(loading, "cuda_memory", lambda device: (2**20, 141 * 2**30))   # the model is loaded now
    assert ModelSpec(folder, dtype="bfloat16", quantization="auto", device="cuda:0").resolved().key == roomy.key
    tight = ModelSpec(folder, dtype="bfloat16", quantization="auto", device="cuda:1").resolved()  # another GPU, full
    assert tight.quantization == "nf4" and tight.key != roomy.key
