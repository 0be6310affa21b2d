"""The evaluation LM through an OpenAI-compatible completions server vs the local engine, side by side.

The same GEM requests (real judgments of the ICLR 2023 dev file: each review's judgments as the
candidate, another review of the paper as the continuation) are scored twice, in one run:

* local: the prefix-sharing engine of tasks/lm/loglikelihood.py in this process;
* server: `CompletionsLM` (tasks/lm/completions.py) through the real `openai` client against the
  project's local server (tasks/testing/completions.py: one plain forward pass per prompt on the same
  embedded model), `--batch-size` prompts per HTTP request, `--in-flight` requests at once.

Prints tokens per second for both (every prompt and continuation token of the requests), the largest
difference in nats (total and per token), the same for the Yes/No readout of a few oracle questions,
and the HTTP requests sent. The server here runs the naive computation on this machine's CPU, so
its throughput says what the HTTP path and the echoed-log-probability parsing cost, not what vLLM on
a GPU does (docs/engines.md). The last line is JSON.

    .venv/bin/python bench/speed/completions.py [--pairs 24] [--batch-size 8] [--in-flight 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from tasks.core.config import LLMConfig  # noqa: E402
from tasks.lm import LoglikelihoodRequest, ModelSpec, local_lm, make_lm  # noqa: E402
from tasks.lm.loading import chat_ids  # noqa: E402
from tasks.lm.readout import answer_probabilities  # noqa: E402
from tasks.metrics.gem import system_prompt  # noqa: E402
from tasks.testing.completions import LocalCompletions  # noqa: E402
from tasks.testing.openai_server import OpenAIServer  # noqa: E402

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "iclr2023_dev.parquet"


def gem_requests(path: Path, n: int) -> list[LoglikelihoodRequest]:
    data = pl.read_parquet(path)
    out: list[LoglikelihoodRequest] = []
    for paper in data.partition_by("paper_id", maintain_order=True):
        texts = [t for t in paper["judgments_reference"].to_list() if t and t.strip()]
        for i, x in enumerate(texts):
            for j, y in enumerate(texts):
                if i != j and len(out) < n:
                    out.append(LoglikelihoodRequest(system_prompt("judgments"), x, y))
        if len(out) >= n:
            break
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=24)
    parser.add_argument("--batch-size", type=int, default=8, help="prompts per HTTP request")
    parser.add_argument("--in-flight", type=int, default=2, help="HTTP requests at once")
    parser.add_argument("--data", default=str(DATA))
    args = parser.parse_args()
    if args.pairs < 1 or args.batch_size < 1 or args.in_flight < 1:
        parser.error("--pairs, --batch-size and --in-flight must be positive")
    if not Path(args.data).is_file():
        print(json.dumps({"skipped": True, "reason": f"{args.data} not found"}))
        return
    requests = gem_requests(Path(args.data), args.pairs)
    local = local_lm(ModelSpec())
    tokenizer = local.tokenizer
    tokens = sum(len(chat_ids(tokenizer, r.system, r.user)) + len(tokenizer(r.continuation)["input_ids"]) + 1
                 for r in requests)
    local.loglikelihood(requests[:1])   # load the model (not timed)

    start = time.perf_counter()
    want = local.loglikelihood(requests)
    local_s = time.perf_counter() - start

    questions = [(r.system, r.user[:600] + "\n\nDoes this assessment praise the paper? Answer Yes or No.")
                 for r in requests[:4]]
    with tempfile.TemporaryDirectory() as cache, OpenAIServer(completions=LocalCompletions()) as server:
        cfg = LLMConfig(backend="openai", api="completions", model="smollm2-served", tokenizer="smollm2",
                        base_url=server.base_url, api_key_env="", batch_size=args.batch_size,
                        max_in_flight=args.in_flight)
        served = make_lm(cfg, Path(cache))
        start = time.perf_counter()
        got = served.loglikelihood(requests)
        server_s = time.perf_counter() - start
        http = server.counts["completions"]
        readout_server = answer_probabilities(served, questions, ["Yes", "No"])
        start = time.perf_counter()
        served.loglikelihood(requests)       # again: answered by the SQLite cache
        cached_s = time.perf_counter() - start
    readout_local = answer_probabilities(local, questions, ["Yes", "No"])

    total = max(abs(a.logprob - b.logprob) for a, b in zip(want, got, strict=True))
    per_token = max(abs(x - y) for a, b in zip(want, got, strict=True)
                    for x, y in zip(a.token_logprobs, b.token_logprobs, strict=True))
    same_counts = all(a.n_tokens == b.n_tokens for a, b in zip(want, got, strict=True))
    figures = {
        "requests": len(requests), "tokens": tokens, "http_requests": http,
        "local_seconds": round(local_s, 2), "server_seconds": round(server_s, 2), "cached_seconds": round(cached_s, 3),
        "local_tokens_per_s": round(tokens / local_s, 1), "server_tokens_per_s": round(tokens / server_s, 1),
        "server_vs_local": round(local_s / server_s, 3),
        "max_abs_diff_nats": total, "max_abs_diff_per_token": per_token, "same_token_counts": same_counts,
        "readout_max_abs_diff": float(np.abs(readout_server - readout_local).max()),
    }
    print(f"{len(requests)} GEM requests, {tokens} tokens: local engine {figures['local_tokens_per_s']} tok/s, "
          f"completions server {figures['server_tokens_per_s']} tok/s ({http} HTTP requests); "
          f"max |diff| {total:.2e} nats, readout {figures['readout_max_abs_diff']:.2e}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
