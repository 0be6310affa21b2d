"""Local generation speed: the fast decoding loop vs transformers' `generate`, same requests, one run.

Two kinds of requests on the embedded SmolLM2, both as the stages send them:

* judgments: `--reviews` reviews (../shared/data/iclr2023_dev.parquet, else synthetic ones) under
  the judgments prompt with the line-prefix constraint and prefill, `--max-tokens` each
  (the preprocess stage);
* reviews: `--papers` synthetic papers cut to the demo's smollm2-review context, review prompt and
  prefill, no constraint (the generate stage).

Each kind runs through `LocalLM(decoder="generate")` (transformers' `generate`, the reference) and
`LocalLM(decoder="fast")` (tasks/lm/decode.py with drafts copied from the context; add `stepwise`
to `--decoders` for the same loop one token per step), rotating which goes first per batch so load
on a shared machine falls on all alike. Prints per kind and decoder: generated tokens, wall and
CPU seconds, tokens/s, forward passes and drafted / kept tokens; each decoder's speedup over the
first (wall and CPU time) and whether every answer is byte-identical to it (the mismatching request
ids otherwise). Model loading and the constraint's construction are not timed. The last line is JSON.

    .venv/bin/python bench/speed/generate_speed.py --reviews 8 --papers 0 --batch-size 8
    .venv/bin/python bench/speed/generate_speed.py --reviews 0 --papers 4 --batch-size 4 --decoders generate,fast,stepwise
    .venv/bin/python bench/speed/generate_speed.py --thread-probe   # 1 thread vs every core, prompt and step
    .venv/bin/python bench/speed/generate_speed.py --reviews 8 --papers 4 --batch-size 8 --decoders fast:float32,fast:bfloat16,fast:int8
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import polars as pl  # noqa: E402

from tasks.core.config import PreprocessConfig  # noqa: E402
from tasks.core.prompts import load_prompt  # noqa: E402
from tasks.judgments.extract import LINE_PREFIXES, PREFILL, render  # noqa: E402
from tasks.lm import ChatRequest, chat_spec  # noqa: E402
from tasks.lm.local import LocalLM, generation_threads  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "iclr2023_dev.parquet"


def judgment_requests(n: int, max_tokens: int, seed: int) -> list[ChatRequest]:
    if DATA.is_file():
        texts = pl.read_parquet(DATA).sample(n=n, seed=seed)["review"].to_list()
    else:
        from tasks.testing.synthetic import make_venue

        venue = make_venue("GREBench.cc/2025/Demo", n_papers=n, bad_cases=False)
        texts = [note["content"]["review"] for paper in venue.papers for note in paper.reviews][:n]
    system = load_prompt(PreprocessConfig().prompt_version)
    return [ChatRequest(system, render("review", text), max_tokens, f"review-{i}", PREFILL["review"],
                        line_prefixes=LINE_PREFIXES["review"]) for i, text in enumerate(texts)]


def synthetic_papers(n: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """`n` papers of a synthetic venue (paper_id, venue_id, title, abstract) and their PDF texts."""
    from tasks.stages.ingest.pdf import extract_text
    from tasks.testing.synthetic import make_venue

    venue = make_venue("GREBench.cc/2025/Demo", n_papers=n, bad_cases=False)
    rows, texts = [], []
    for paper in venue.papers:
        rows.append({"paper_id": paper.paper_id, "venue_id": venue.venue_id, "title": paper.title,
                     "abstract": paper.abstract})
        if paper.pdf:
            texts.append({"paper_id": paper.paper_id, "text": extract_text(paper.pdf).text})
    return pl.DataFrame(rows), pl.DataFrame(texts)


def review_requests(n: int, seed: int) -> list[ChatRequest]:
    from tasks.core.config import load_config
    from tasks.stages.generate.reviews import LOCAL_PREFILL, fit_paper, make_meter, paper_text, render_user

    candidate = load_config(ROOT / "pipelines.toml").for_pipeline("demo").generate.candidates[0]
    papers, texts = synthetic_papers(n)
    text_of = dict(texts.iter_rows())
    system = load_prompt(candidate.prompt_version)
    meter = make_meter(candidate, 4.0)
    requests = []
    for row in papers.iter_rows(named=True):
        text, _ = paper_text(row, text_of.get(row["paper_id"]))
        fit = fit_paper(text, system, LOCAL_PREFILL, candidate, meter)
        if fit is not None:
            requests.append(ChatRequest(system, render_user(fit.text), candidate.max_tokens, row["paper_id"],
                                        LOCAL_PREFILL))
    return requests


def run(kind: str, requests: list[ChatRequest], batch_size: int, decoders: list[str]) -> dict:
    """Every decoder on the same requests, rotating which goes first per batch; the first decoder
    is the reference the others' speedups and byte identity are measured against."""
    lms = {name: LocalLM(variant_spec(name), batch_size=batch_size, decoder=name.split(":")[0]) for name in decoders}
    if requests[0].line_prefixes:
        lms[decoders[0]].constraint(requests[0].line_prefixes)       # built once per process, not timed
    answers: dict[str, dict[str, str]] = {name: {} for name in lms}
    cpu = dict.fromkeys(lms, 0.0)
    order = list(lms)
    for start in range(0, len(requests), batch_size):
        chunk = requests[start : start + batch_size]
        for name in order:
            before = time.process_time()
            for request, result in zip(chunk, lms[name].generate(chunk), strict=True):
                answers[name][request.custom_id] = result.text
            cpu[name] += time.process_time() - before
        order = order[1:] + order[:1]
    figures: dict = {"requests": len(requests), "batch_size": batch_size}
    reference = decoders[0]
    for name, lm in lms.items():
        figures[name] = {"tokens": lm.generated_tokens, "seconds": round(lm.generate_seconds, 1),
                         "cpu_seconds": round(cpu[name], 1), "tokens_per_s": round(lm.tokens_per_second, 2)}
        if lm._greedy is not None:
            greedy = lm._greedy
            figures[name] |= {"forwards": greedy.forwards, "drafted": greedy.drafted, "kept": greedy.kept}
        if name != reference:
            differ = [key for key in answers[reference] if answers[reference][key] != answers[name][key]]
            figures[name] |= {"speedup": round(lms[reference].generate_seconds / lm.generate_seconds, 2),
                              "speedup_cpu_time": round(cpu[reference] / cpu[name], 2),
                              "identical": not differ, "differ": differ}
    print(kind, f"(vs {reference}, same requests):", flush=True)
    for name in decoders:
        row = figures[name]
        extra = "" if name == reference else (f"  speedup {row['speedup']}x wall, {row['speedup_cpu_time']}x CPU, "
                                               f"byte-identical: {row['identical']}")
        print(f"  {name:9s} {row['tokens']:5d} tokens  {row['seconds']:7.1f} s ({row['cpu_seconds']:.1f} s CPU)  "
              f"{row['tokens_per_s']:6.2f} tokens/s{extra}", flush=True)
    return figures


def variant_spec(name: str):
    """The model of a decoder name "decoder[:weights]": weights "int8" (torch's dynamic int8, float32
    around it), "float32" or "bfloat16"; none: the embedded model as "auto" resolves it here."""
    _, _, weights = name.partition(":")
    if weights == "int8":
        return chat_spec(PreprocessConfig(quantization="int8"))
    return chat_spec(PreprocessConfig(dtype=weights or "auto"))


def thread_probe(repeats: int = 3) -> dict:
    """Seconds of one 1,000-token prompt and milliseconds of one decoding step (batch 4, 64 tokens
    of context) on 1 thread and on every core, alternating which goes first."""
    import torch

    from tasks.lm import ModelSpec, load_model
    from tasks.lm.local import available_cores

    model, _ = load_model(ModelSpec())
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(100, 40000, (1, 1000), generator=generator)
    step = torch.randint(100, 40000, (4, 1), generator=generator)
    counts = sorted({1, available_cores()})
    timings: dict[int, list[tuple[float, float]]] = {n: [] for n in counts}
    before = torch.get_num_threads()
    with torch.inference_mode():
        for rep in range(repeats):
            for n in counts if rep % 2 == 0 else counts[::-1]:
                torch.set_num_threads(n)
                started = time.perf_counter()
                model(input_ids=prompt, logits_to_keep=1)
                prefill = time.perf_counter() - started
                past = model(input_ids=step.repeat(1, 64), use_cache=True).past_key_values
                started = time.perf_counter()
                for _ in range(10):
                    model(input_ids=step, past_key_values=past, use_cache=True)
                timings[n].append((round(prefill, 2), round((time.perf_counter() - started) * 100)))
    torch.set_num_threads(before)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    figures = {f"threads_{n}": {"prefill_1000_tokens_s": [p for p, _ in t], "decode_step_ms": [d for _, d in t]}
               for n, t in timings.items()}
    figures["load_average_1min"] = load
    print("thread probe", figures, flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reviews", type=int, default=8, help="judgment requests (0: none)")
    parser.add_argument("--papers", type=int, default=4, help="review requests (0: none)")
    parser.add_argument("--max-tokens", type=int, default=160, help="judgment answer limit (the demo's)")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--decoders", default="generate,fast",
                        help="LocalLM decoders to compare, the reference first (generate, fast, stepwise), "
                             "each optionally with its weights: fast:int8, fast:float32, fast:bfloat16")
    parser.add_argument("--thread-probe", action="store_true",
                        help="only time one prompt and one decoding step on 1 thread vs every core")
    args = parser.parse_args()
    if args.thread_probe:
        print(json.dumps(thread_probe()))
        return
    decoders = args.decoders.split(",")
    figures: dict = {"threads": generation_threads()}
    if args.reviews:
        figures["judgments"] = run("judgments", judgment_requests(args.reviews, args.max_tokens, args.seed),
                                   args.batch_size, decoders)
    if args.papers:
        figures["reviews"] = run("reviews", review_requests(args.papers, args.seed), args.batch_size, decoders)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
