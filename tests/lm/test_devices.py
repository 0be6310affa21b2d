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
    spec = ModelSpec("some/model", dtype="bfloat16", quantization="auto", device="cuda").resolved()
    assert (spec.device, spec.quantization) == ("cuda:1", "nf4")
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
