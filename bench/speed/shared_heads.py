"""Decoding steps on a shared prompt head: read in place once for every row, or copied into each row.

A judge's batch on the embedded SmolLM2: `--rows` prompts that quote one text of `--head` tokens and
then differ (`--tail` tokens each), as the judges, the oracle cells and RevisEval send them. For each
precision in `--dtypes` (the demo's generating roles decode in int8) and each of `GreedyDecoder(share_heads=
True)` and `(share_heads=False)`, in one run and alternating: the prompts are prefilled once, then
`--steps` one-token steps are timed (the median step), on `--threads` torch threads. Prints each
figure, the step's speedup and whether the two ways' greedy answers to the batch (`--answer` tokens)
are the same. The last line is JSON.

    .venv/bin/python bench/speed/shared_heads.py
    .venv/bin/python bench/speed/shared_heads.py --head 1000 --tail 300 --rows 8 --dtypes int8,float32
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from tasks.lm.decode import GreedyDecoder  # noqa: E402
from tasks.lm.loading import ModelSpec, load_model  # noqa: E402


def prompts(tokenizer, head: int, tail: int, rows: int) -> list[tuple[int, ...]]:
    words = " ".join(f"Section {i} states that the method improves accuracy by {i % 7} points on benchmark {i}."
                     for i in range(400))
    ids = tokenizer(words)["input_ids"]
    shared = ids[:head]
    return [tuple(shared + ids[head + r * tail : head + (r + 1) * tail]) for r in range(rows)]


def step_ms(decoder: GreedyDecoder, batch: list[tuple[int, ...]], steps: int) -> float:
    with torch.inference_mode():
        first, cache, mask, lengths = decoder._prefill(batch, steps + 2)
        tokens = first.argmax(-1).tolist()
        times = []
        for _ in range(steps):
            started = time.perf_counter()
            logits = decoder._step(tokens, cache, mask, lengths)
            times.append(time.perf_counter() - started)
            lengths = lengths + 1
            tokens = logits.argmax(-1).tolist()
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--head", type=int, default=1000)
    parser.add_argument("--tail", type=int, default=300)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--answer", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtypes", default="int8,float32")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    figures = {"head": args.head, "tail": args.tail, "rows": args.rows, "threads": args.threads,
               "torch": torch.__version__}
    for dtype in args.dtypes.split(","):
        spec = ModelSpec(dtype="float32", quantization="int8") if dtype == "int8" else ModelSpec(dtype=dtype)
        model, tokenizer = load_model(spec.resolved())
        batch = prompts(tokenizer, args.head, args.tail, args.rows)
        decoders = {share: GreedyDecoder(model, share_heads=share) for share in (True, False)}
        if not decoders[True].share_heads:
            print(f"{dtype}: this model keeps its heads copied (shared_heads.can_share)")
            continue
        timed: dict[bool, list[float]] = {True: [], False: []}
        for turn in range(2):
            for share in ((True, False) if turn % 2 == 0 else (False, True)):
                timed[share].append(step_ms(decoders[share], batch, args.steps))
        answers = {share: decoders[share].generate(batch, [args.answer] * args.rows, {tokenizer.eos_token_id})
                   for share in (True, False)}
        shared_ms, copied_ms = min(timed[True]), min(timed[False])
        figures[dtype] = {"step_ms_shared": round(shared_ms, 1), "step_ms_copied": round(copied_ms, 1),
                          "speedup": round(copied_ms / shared_ms, 2),
                          "same_answers": sum(a == b for a, b in zip(answers[True], answers[False], strict=True))}
        print(f"{dtype}: one step of {args.rows} rows on a {args.head}-token head + {args.tail} each: "
              f"shared {shared_ms:.1f} ms, copied {copied_ms:.1f} ms ({copied_ms / shared_ms:.2f}x); "
              f"same greedy answers {figures[dtype]['same_answers']} of {args.rows}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
