"""Errors that stop a run with one line: the CLI prints them as `error: <message>`, no traceback.

Every one derives from `GrebenchError`, the one root the CLI catches; anything else is a bug and
keeps its traceback. `TransientError` marks a failure worth retrying (tasks/core/retry.py).
"""

from __future__ import annotations


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
