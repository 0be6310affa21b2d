"""The paper's chunks, the summary's coverage of them (eq. 1) and the question checks (eq. 5).

Chunks: the paper text (the PDF text curation kept, else the abstract) cut into windows of
`chunk_tokens` whitespace-separated words overlapping by `chunk_overlap` (the paper's 512 / 128
tokens, counted in words here so that no tokenizer is tied to the chunking). Each chunk and each
text is embedded by the mean of its MiniLM token vectors (tasks/metrics/review_quality/matching.py).

Question checks: for a question point of kind Explain, the LLM is asked whether the `top_k` chunks
most similar to the question contain what the question asks to explain (conf = Yes); for a
Supplement question, whether they already provide what it asks for (cons = No). Other questions
are not asked (they count 0 in eq. 5). Answers are cached by content; an answer that is neither
Yes nor No leaves the point unanswered (left out of the score, counted).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from tasks.lm.ask import raise_if_transient
from tasks.metrics.review_quality.formulas import question_value
from tasks.metrics.review_quality.matching import mean_vectors, parse_yes_no

PROMPT_VERSION = "question-check-v1"
MAX_TOKENS = 3

# One row per question point checked: its kind, the LLM's answer and (conf OR cons).
QUESTION_CHECKS = pl.Schema({"review_id": pl.String, "paper_id": pl.String, "position": pl.Int32,
                             "kind": pl.String, "answer": pl.Boolean, "value": pl.Int8})


def chunks(text: str | None, size: int = 512, overlap: int = 128) -> list[str]:
    """Windows of `size` words, each starting `size - overlap` words after the last; the last
    window ends at the text's end."""
    if overlap >= size:
        raise ValueError("chunk overlap must be smaller than the chunk size")
    words = (text or "").split()
    if not words:
        return []
    step, out = size - overlap, []
    for start in range(0, len(words), step):
        out.append(" ".join(words[start:start + size]))
        if start + size >= len(words):
            break
    return out


@dataclass
class PaperChunks:
    texts: list[str]
    vectors: np.ndarray


def paper_chunks(papers: dict[str, str], embed: Callable[[Sequence[str]], list[np.ndarray]], size: int,
                 overlap: int) -> dict[str, PaperChunks]:
    """paper_id -> its chunks and their vectors (one embedding call for all papers)."""
    cut = {p: chunks(t, size, overlap) for p, t in papers.items()}
    flat = [c for p in sorted(cut) for c in cut[p]]
    vectors = mean_vectors(embed, flat)
    out, i = {}, 0
    for p in sorted(cut):
        n = len(cut[p])
        out[p] = PaperChunks(cut[p], vectors[i:i + n] if n else np.zeros((0, 1)))
        i += n
    return out


def top_chunks(query: np.ndarray, paper: PaperChunks, k: int) -> list[str]:
    if not paper.texts:
        return []
    order = np.argsort(-(paper.vectors @ query), kind="stable")[:k]
    return [paper.texts[i] for i in sorted(order.tolist())]


def check_user(mode: str, question: str, passages: Sequence[str]) -> str:
    body = "\n\n".join(f"<passage>\n{p}\n</passage>" for p in passages)
    return f"Decide: {mode}\n\n{body}\n\n<question>\n{question.strip()}\n</question>\n\nYes or No."


@dataclass
class QuestionOutput:
    checks: pl.DataFrame     # QUESTION_CHECKS
    stats: Counter


def check_questions(points: pl.DataFrame, chunked: dict[str, PaperChunks],
                    embed: Callable[[Sequence[str]], list[np.ndarray]], llm: Any, system: str,
                    k: int = 5) -> QuestionOutput:
    """QUESTION_CHECKS of the question points among POINTS."""
    from tasks.lm.types import ChatRequest

    questions = points.filter(pl.col("field") == "questions").sort("review_id", "position")
    texts = questions["text"].to_list()
    vectors = mean_vectors(embed, texts) if texts else np.zeros((0, 1))
    plans, asks = [], {}
    for row, vec in zip(questions.iter_rows(named=True), vectors, strict=True):
        mode = {"Explain": "contains", "Supplement": "provides"}.get(row["kind"])
        passages = top_chunks(vec, chunked[row["paper_id"]], k) if mode and row["paper_id"] in chunked else []
        key = None
        if mode and passages:
            user = check_user(mode, row["text"], passages)
            key = hashlib.sha256(json.dumps([PROMPT_VERSION, user]).encode()).hexdigest()[:24]
            asks.setdefault(key, user)
        plans.append((row, mode, key))
    keys = sorted(asks)
    results = llm.generate([ChatRequest(system, asks[k_], MAX_TOKENS, custom_id=k_, line_prefixes=("Yes", "No"))
                            for k_ in keys]) if keys else []
    raise_if_transient(results)   # retried by the stage, never recorded as unanswered
    answers = {k_: parse_yes_no(r.text) if r.ok else None for k_, r in zip(keys, results, strict=True)}
    rows, stats = [], Counter(questions=questions.height, asked=len(keys))
    for row, mode, key in plans:
        answer = answers.get(key) if key else None
        if mode and key is None:
            stats["no_paper_text"] += 1
        value = question_value(row["kind"], answer if mode == "contains" else None,
                               answer if mode == "provides" else None) if key or not mode else None
        stats["unanswered"] += int(mode is not None and value is None)
        rows.append({"review_id": row["review_id"], "paper_id": row["paper_id"], "position": row["position"],
                     "kind": row["kind"], "answer": answer, "value": value})
    frame = pl.DataFrame(rows, schema=QUESTION_CHECKS) if rows else pl.DataFrame(schema=QUESTION_CHECKS)
    return QuestionOutput(frame, stats)
