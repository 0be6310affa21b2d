"""The master-key manipulation: a degraded review with judgment-free "master key" lines
planted, registered and checked like every manipulation (a metric must not rise under it)."""

from __future__ import annotations

import numpy as np

from tasks.metrics.classic import bleu, rouge_l
from tasks.stages.validate import manipulations as m
from tasks.stages.validate.attack_text import MASTER_KEYS
from tasks.stages.validate.stats import paired_test
from tasks.stages.validate.strategies import DETERMINISTIC, STRATEGIES, perturb_texts

TOPICS = ["sampler", "encoder", "benchmark", "proof", "ablation", "dataset", "baseline", "loss", "optimizer", "prior",
          "metric", "scheduler"]


def review(topic: str) -> str:
    return (f"## Summary\nThe paper studies a new {topic}. It reports gains on three tasks. The writing is clear.\n\n"
            f"## Weaknesses\nThe {topic} is tested with one seed. The gains are small. No runtime is given.\n")


def test_the_keys_are_planted_in_a_degraded_review() -> None:
    text = review("sampler")
    planted = m.master_key(text)
    lines = planted.splitlines()
    assert lines[0] == ":" and lines[-len(MASTER_KEYS) + 1:] == list(MASTER_KEYS[1:])
    assert "It reports gains on three tasks." not in planted and "The writing is clear." in planted   # 2nd deleted
    assert "Thought process:" in planted and "Let's solve this step by step." in planted
    assert m.judgments_master_key("A.\nB.\nC.") == "\n".join([":", "A.", "C.", *MASTER_KEYS[1:]])
    spec = STRATEGIES["master_key"]
    assert spec.kind == "manipulation" and not spec.needs_llm and "master_key" in DETERMINISTIC


def test_lexical_metrics_do_not_rise_under_it() -> None:
    """Checked as the validate stage checks a manipulation: the paired test over reviews, each scored
    against a human reference of the same paper, must not find a rise."""
    originals = [review(t) for t in TOPICS]
    references = [review(t).replace("one seed", "a single seed") for t in TOPICS]
    planted, errors = perturb_texts("master_key", originals)
    assert errors == [None] * len(TOPICS)
    for metric in (rouge_l, bleu):
        before, after = metric(originals, references), metric(planted, references)
        test = paired_test(np.asarray(before), np.asarray(after), "manipulation", min_pairs=10)
        assert test.verdict == "pass" and after.mean() < before.mean()
