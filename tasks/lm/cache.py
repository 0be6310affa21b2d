"""Content-addressed cache of LLM answers in one SQLite file, and `CachedLM`, which puts it in
front of any `LanguageModel`.

The key hashes everything that changes an answer: the backend and its model identity (for a
local model also dtype, quantization and decoding settings), max_tokens, the full system and user
text (which carry the prompt version), the prefill and the line prefixes. Decoding is greedy or
the remote default; a local model at a temperature above 0 samples with a seed of the request
and its draw (`ChatRequest.sample`, part of the key), so each draw is cached on its own. Only usable answers are stored, so a rerun with the
same inputs makes zero LLM calls while a failed or rejected answer is asked again. Answers are
stored as the backend hands them back (its `on_answers` hook), each group in one transaction, and a
batch API's batch id is kept until its answers are stored: a run killed after hours of calls loses
at most the answers in flight, and its rerun sends only those still missing. Each operation
opens its own connection, so threads and processes may share the file (SQLite serialises
writers; WAL lets readers run alongside). Log-likelihoods from a server (a backend with
`cache_loglikelihood`, tasks/lm/completions.py) are kept too, keyed by `loglikelihood_key`, and so are
a chat API's top next tokens (`top_logprobs`, keyed by `top_logprobs_key`: greedy, so deterministic
up to the server's own noise); a local model's log-likelihoods and embeddings pass straight through
(the score stage keeps its own resumable shards).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tasks.core import damage
from tasks.lm.types import (
    Accept,
    ChatRequest,
    ChatResult,
    LanguageModel,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    OnAnswers,
    Pooling,
    TopLogprobs,
    Unsupported,
    Usage,
)

if TYPE_CHECKING:
    from tasks.core.config import LLMConfig

_SCHEMA = """
CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, result TEXT NOT NULL, created_at TEXT
    DEFAULT CURRENT_TIMESTAMP);
CREATE TABLE IF NOT EXISTS batches (key TEXT PRIMARY KEY, batch_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS loglikelihoods (key TEXT PRIMARY KEY, logprob REAL NOT NULL, n_tokens INTEGER NOT NULL,
    token_logprobs TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS top_logprobs (key TEXT PRIMARY KEY, alternatives TEXT NOT NULL);
"""


def request_key(identity: str, request: ChatRequest) -> str:
    """sha256 over the backend/model identity (with its decoding settings), max_tokens, the full
    prompt text and, when set, the forced answer beginning, the line prefixes, `one_line` and the draw (`sample`)."""
    parts: list[object] = [identity, request.max_tokens, request.system, request.user]
    if request.prefill or request.line_prefixes:
        parts.append({"prefill": request.prefill, "line_prefixes": list(request.line_prefixes)})
    if request.one_line:
        parts.append({"one_line": True})
    if request.sample:
        parts.append({"sample": request.sample})
    payload = json.dumps(parts, ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def loglikelihood_key(identity: str, request: LoglikelihoodRequest) -> str:
    """sha256 over the server's log-likelihood identity (model, host, tokenizer) and the request's texts."""
    payload = json.dumps([identity, request.system, request.user, request.continuation], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def top_logprobs_key(identity: str, request: ChatRequest) -> str:
    """`request_key` of the request under an identity that says its answer is the next tokens' top list."""
    return request_key(f"{identity}|top_logprobs", request)


class LLMCache:
    """A key -> ChatResult store (also remembers in-flight batch ids so a crashed run re-attaches)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with damage.reading(self.path, "move it aside (its answers are asked again) and rerun"), \
                self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A connection closed on exit (sqlite3's own context manager only commits): one left to the garbage
        collector is closed in whichever thread collects it, inside whatever that thread was doing."""
        db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        # WAL with synchronous=NORMAL: a commit survives the process being killed (what resuming needs)
        # without an fsync per answer; a power cut may undo the last commits, never corrupt the file.
        db.execute("PRAGMA synchronous=NORMAL")
        try:
            yield db
        finally:
            db.close()

    def _rows(self, query: str, keys: Sequence[str]) -> list[tuple]:
        """The rows of `query` (which ends in "WHERE key IN") for `keys`, asked 500 keys at a time
        (SQLite's limit on bound variables)."""
        rows: list[tuple] = []
        with self._connect() as db:
            for start in range(0, len(keys), 500):
                chunk = list(keys[start : start + 500])
                rows += db.execute(f"{query} ({','.join('?' * len(chunk))})", chunk).fetchall()
        return rows

    def get_many(self, keys: Sequence[str]) -> dict[str, ChatResult]:
        return {key: ChatResult(**json.loads(text))
                for key, text in self._rows("SELECT key, result FROM answers WHERE key IN", keys)}

    def put_many(self, items: Sequence[tuple[str, ChatResult]]) -> None:
        """Store `items` in one transaction: all of them or, if the process dies first, none."""
        if not items:
            return
        rows = [(key, json.dumps(asdict(result), ensure_ascii=False)) for key, result in items]
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            db.executemany("INSERT OR REPLACE INTO answers (key, result) VALUES (?, ?)", rows)
            db.execute("COMMIT")

    def __len__(self) -> int:
        with self._connect() as db:
            return db.execute("SELECT count(*) FROM answers").fetchone()[0]

    def get_loglikelihoods(self, keys: Sequence[str]) -> dict[str, LoglikelihoodResult]:
        rows = self._rows("SELECT key, logprob, n_tokens, token_logprobs FROM loglikelihoods WHERE key IN", keys)
        return {key: LoglikelihoodResult(logprob, n_tokens, tuple(json.loads(values)))
                for key, logprob, n_tokens, values in rows}

    def put_loglikelihoods(self, items: Sequence[tuple[str, LoglikelihoodResult]]) -> None:
        rows = [(key, r.logprob, r.n_tokens, json.dumps(list(r.token_logprobs or ()))) for key, r in items]
        if rows:
            with self._connect() as db:
                db.executemany("INSERT OR REPLACE INTO loglikelihoods VALUES (?, ?, ?, ?)", rows)

    def get_top_logprobs(self, keys: Sequence[str]) -> dict[str, TopLogprobs]:
        return {key: TopLogprobs(tuple((t, float(v)) for t, v in json.loads(text)), cached=True)
                for key, text in self._rows("SELECT key, alternatives FROM top_logprobs WHERE key IN", keys)}

    def put_top_logprobs(self, items: Sequence[tuple[str, TopLogprobs]]) -> None:
        rows = [(key, json.dumps([list(a) for a in r.alternatives], ensure_ascii=False)) for key, r in items]
        if rows:
            with self._connect() as db:
                db.executemany("INSERT OR REPLACE INTO top_logprobs VALUES (?, ?)", rows)

    def batch_id(self, key: str) -> str | None:
        with self._connect() as db:
            row = db.execute("SELECT batch_id FROM batches WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def remember_batch(self, key: str, batch_id: str | None) -> None:
        with self._connect() as db:
            if batch_id is None:
                db.execute("DELETE FROM batches WHERE key = ?", (key,))
            else:
                db.execute("INSERT OR REPLACE INTO batches VALUES (?, ?)", (key, batch_id))


class CachedLM:
    """Any `LanguageModel` behind an `LLMCache`; keeps running usage totals for the whole run.

    Only `generate` is cached (keyed by `request_key` over the inner model's `identity`); a backend
    that needs the store itself (the Anthropic one remembers in-flight batches) is given it when built.
    """

    def __init__(self, inner: LanguageModel, cache: LLMCache, cfg: LLMConfig) -> None:
        self.inner = inner
        self.cache = cache
        self.cfg = cfg
        self.name = inner.name
        self.model = inner.model
        self.identity = inner.identity
        self.usage = Usage()
        self.loglikelihood_cached = 0   # log-likelihood requests answered from the cache
        self.top_logprobs_cached = 0    # top_logprobs requests answered from the cache

    def generate(self, requests: Sequence[ChatRequest], accept: Accept | None = None,
                 on_answers: OnAnswers | None = None) -> list[ChatResult]:
        """Answers from the cache where present, the rest from the backend; `accept` decides which
        fresh answers are usable enough to store (default: any non-empty answer without an error).
        Fresh answers are stored as the backend hands them back (one transaction per request, local
        batch or API batch), not when the whole list is done, so a run killed half way keeps what it
        was sent and its rerun asks only the rest. `on_answers` hears the hits at once, the rest as they
        come."""
        keys = [request_key(self.identity, request) for request in requests]
        hits = self.cache.get_many(sorted(set(keys)))
        results: list[ChatResult | None] = [
            replace(hits[key], cached=True) if key in hits else None for key in keys
        ]
        if on_answers is not None and hits:
            on_answers([(i, result) for i, result in enumerate(results) if result is not None])
        missing = [i for i, result in enumerate(results) if result is None]
        # identical requests in one call are sent once
        first_of: dict[str, int] = {}
        for i in missing:
            first_of.setdefault(keys[i], i)
        unique = list(first_of.values())

        def store(answers: Sequence[tuple[int, ChatResult]]) -> None:
            self.cache.put_many([(keys[unique[k]], result) for k, result in answers
                                 if result.ok and (accept is None or accept(result))])
            if on_answers is not None:
                on_answers([(unique[k], result) for k, result in answers])
        fresh = self.inner.generate([requests[i] for i in unique], on_answers=store) if unique else []
        by_key = {keys[i]: result for i, result in zip(unique, fresh, strict=True)}
        for i in missing:
            results[i] = by_key[keys[i]] if first_of[keys[i]] == i else replace(by_key[keys[i]], cached=True)
        final = [result for result in results if result is not None]
        for result in final:
            self.usage.add(result, self.cfg)
        return final

    @property
    def tokenizer(self) -> object:
        """The inner model's tokenizer (a local model or a completions server: the readout checks answers with it)."""
        return self.inner.tokenizer  # type: ignore[attr-defined]

    def kept_loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        """`loglikelihood` stored in the answer cache whatever the backend, a local model's included: for
        readouts that recur across runs and perturbations (a sentence's judgment opening), keyed by the
        model's identity and the request's texts."""
        identity = getattr(self.inner, "loglikelihood_identity", None) or f"{self.identity}|loglikelihood"
        keys = [loglikelihood_key(identity, r) for r in requests]
        found = self.cache.get_loglikelihoods(sorted(set(keys)))
        missing = list(dict.fromkeys(k for k in keys if k not in found))
        if missing:
            first = {k: requests[i] for i, k in reversed(list(enumerate(keys)))}
            fresh = self.inner.loglikelihood([first[k] for k in missing])
            self.cache.put_loglikelihoods(list(zip(missing, fresh, strict=True)))
            found.update(zip(missing, fresh, strict=True))
        self.loglikelihood_cached += len(keys) - len(missing)
        return [found[k] for k in keys]

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        """A server's answers from the cache where present, the rest asked and stored; a local
        model's straight from the model."""
        if not getattr(self.inner, "cache_loglikelihood", False):
            return self.inner.loglikelihood(requests)
        return self.kept_loglikelihood(requests)

    def top_logprobs(self, requests: Sequence[ChatRequest]) -> list[TopLogprobs]:
        """The next tokens' top list from the cache where present, the rest asked and stored (only
        answers with alternatives); the backend's `Unsupported` passes through."""
        keys = [top_logprobs_key(self.identity, r) for r in requests]
        found = self.cache.get_top_logprobs(sorted(set(keys)))
        missing = list(dict.fromkeys(k for k in keys if k not in found))
        if missing or not requests:
            first = {k: requests[i] for i, k in reversed(list(enumerate(keys)))}
            ask = getattr(self.inner, "top_logprobs", None)
            if ask is None:
                raise Unsupported(f"{self.model}: this backend shows no top next tokens")
            fresh = ask([first[k] for k in missing])
            self.cache.put_top_logprobs([(k, r) for k, r in zip(missing, fresh, strict=True)
                                         if r.error is None and r.alternatives])
            found.update(zip(missing, fresh, strict=True))
        self.top_logprobs_cached += len(keys) - len(missing)
        return [found[k] for k in keys]

    def embed(self, texts: Sequence[str], pooling: Pooling = "tokens") -> list[np.ndarray]:
        return self.inner.embed(texts, pooling)
