"""The scoring engine runs where only torch and transformers are installed (a bare GPU machine):
`tasks.lm.loglikelihood` imports nothing of the data stack, and `bench/speed/gpu_engine.py` starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# what a GPU image with torch and transformers lacks: importing any of these fails in the child
BLOCKER = """
import importlib.abc, sys
BLOCK = {"polars", "duckdb", "prefect", "pydantic", "pyarrow", "great_expectations", "openreview", "anthropic",
         "openai"}
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCK:
            raise ImportError(f"{name} is not installed on this machine")
sys.meta_path.insert(0, Blocker())
sys.path.insert(0, %r)
"""
ENGINE = """
import json, sys, torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
from tasks.lm.loglikelihood import LoglikelihoodEngine, reference_score
from tasks.lm.types import LoglikelihoodRequest
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                     max_position_embeddings=2048)).eval()
requests = [LoglikelihoodRequest("You review papers.", f"Paper {i}: a study of sparse attention.", c)
            for i in range(3) for c in ("The method is sound.", "The experiments are too small.")]
engine = [r.logprob for r in LoglikelihoodEngine(model, tokenizer, token_budget=256).score(requests)]
naive = [r.logprob for r in reference_score(model, tokenizer, requests)]
print(json.dumps({"gap": max(abs(a - b) for a, b in zip(engine, naive)), "n": len(engine),
                  "loaded": sorted(m.split(".")[0] for m in sys.modules if m.split(".")[0] in ("polars", "duckdb", "prefect", "pydantic"))}))
"""


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory) -> Path:
    from tasks.lm.loading import load_tokenizer

    folder = tmp_path_factory.mktemp("tokenizer")
    load_tokenizer().save_pretrained(folder)
    return folder


def bare(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCKER % str(ROOT) + script, *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


@pytest.mark.slow
def test_the_engine_scores_without_the_data_stack_as_the_naive_method_does(tokenizer_folder):
    out = bare(ENGINE, str(tokenizer_folder))
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["n"] == 6 and found["loaded"] == [] and found["gap"] < 1e-3


@pytest.mark.slow
def test_the_gpu_bench_starts_on_a_bare_machine_and_says_when_there_is_no_gpu(tmp_path):
    bench = str(ROOT / "bench" / "speed" / "gpu_engine.py")
    out = bare(f"import runpy; sys.argv = ['gpu_engine.py', '--requests', {str(tmp_path)!r}]; "
               f"runpy.run_path({bench!r}, run_name='__main__')")
    assert out.returncode == 0, out.stderr[-2000:]
    last = json.loads(out.stdout.strip().splitlines()[-1])
    assert "skipped" in last   # no CUDA here (or no exported requests): one line, no traceback
