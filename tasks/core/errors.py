"""Errors that stop a run with one line: the CLI prints them as `error: <message>`, no traceback.

Every one derives from `GrebenchError`, the one root the CLI catches; anything else is a bug and
keeps its traceback. `TransientError` marks a failure worth retrying (tasks/core/retry.py).
"""

from __future__ import annotations

import re

LINE_CHARS = 2000   # the longest error line printed: a 1 MB form label stays a readable line
_BREAKS = re.compile(r"[\r\n\t\v\f\x1c-\x1e\x85\u2028\u2029]+")
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def printable(text: object, limit: int = LINE_CHARS) -> str:
    """`text` as one line a terminal shows as written: line breaks and tabs become spaces (a label
    cannot forge a line of its own), control, escape and direction characters are dropped, and text
    past `limit` characters is cut with an ellipsis."""
    line = _UNPRINTABLE.sub("", _BREAKS.sub(" ", str(text)))
    return line if len(line) <= limit else f"{line[: limit - 1]}\u2026"


class GrebenchError(Exception):
    """The root of every error that stops a run with a one-line message and a non-zero exit."""


class ConfigError(GrebenchError, ValueError):
    """A problem with pipelines.toml or a command's options, phrased as one line that names the key."""


class TransientError(GrebenchError, RuntimeError):
    """A failure that may pass on its own (rate limit, overload, 5xx, a dropped connection): retried."""


class FatalError(GrebenchError, RuntimeError):
    """A failure retrying cannot fix and that must not look like success (exit status non-zero)."""


class AuthenticationError(FatalError):
    """An API refused our credentials (HTTP 401 / 403): every further call would fail the same way."""


class UnreachableError(FatalError):
    """An API's address refused every connection or did not resolve, through all configured retries:
    nothing listens there, so every further call would fail the same way."""


class EmptyOutputError(FatalError):
    """A stage produced nothing because every item failed, and its config does not allow that."""


class SourceError(FatalError):
    """A data source stayed unusable after retries (e.g. the first page of a venue)."""


class LockTimeout(GrebenchError, RuntimeError):
    """Another process held a lock of data/ for longer than the wait allowed."""


class DataTestError(FatalError):
    """A SQL data test (sql/tests/) returned rows: the database was not replaced."""


class CurationValidationError(FatalError):
    """The curated tables broke a great-expectations check."""


class QualificationFailed(FatalError):
    """An LLM in a judging role failed its exam and the config says to stop."""
