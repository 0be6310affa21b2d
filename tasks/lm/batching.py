"""The one batching helper: longest first, under a padded-token budget, results back in input order.

Longest first so an out-of-memory error shows up on the first batch (lm-evaluation-harness's
`Collator` does the same). A batch is closed when adding the next item would make its padded size
(items x widest item) exceed `budget`, when it holds `max_items`, or when the next item belongs to
another `group` (e.g. generation requests with different line prefixes never share a batch). The
sort is stable, so equal keys keep their input order and the batches depend only on the input.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar, cast

T = TypeVar("T")
R = TypeVar("R")


def batches(items: Sequence[T], cost: Callable[[T], int], budget: int | None = None, *,
            key: Callable[[T], Any] | None = None, max_items: int | None = None,
            group: Callable[[T], Hashable] | None = None) -> list[list[int]]:
    """Index batches of `items` in processing order. Sorted by `key` (default: longest `cost`
    first); an item costlier than `budget` on its own still gets a batch of one."""
    order = sorted(range(len(items)), key=(lambda i: key(items[i])) if key else (lambda i: -cost(items[i])))
    out: list[list[int]] = []
    batch: list[int] = []
    width = 0
    label: Hashable = None
    for i in order:
        size = cost(items[i])
        tag = group(items[i]) if group else None
        if batch and ((max_items is not None and len(batch) >= max_items)
                      or (budget is not None and (len(batch) + 1) * max(width, size) > budget)
                      or tag != label):
            out.append(batch)
            batch, width = [], 0
        if not batch:
            label = tag
        batch.append(i)
        width = max(width, size)
    if batch:
        out.append(batch)
    return out


def map_batches(items: Sequence[T], fn: Callable[[list[T]], Sequence[R]], cost: Callable[[T], int],
                budget: int | None = None, *, key: Callable[[T], Any] | None = None, max_items: int | None = None,
                group: Callable[[T], Hashable] | None = None) -> list[R]:
    """`fn` over the batches of `items`; one result per item, in the input order."""
    results: list[R | None] = [None] * len(items)
    for batch in batches(items, cost, budget, key=key, max_items=max_items, group=group):
        answers = fn([items[i] for i in batch])
        if len(answers) != len(batch):
            raise RuntimeError(f"batch function answered {len(answers)} of {len(batch)} items")
        for i, answer in zip(batch, answers, strict=True):
            results[i] = answer
    return cast(list[R], results)   # every slot was filled above
