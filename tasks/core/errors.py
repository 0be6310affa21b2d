"""Errors that stop a run with one line: the CLI prints them as `error: <message>`, no traceback."""

from __future__ import annotations


class FatalError(RuntimeError):
    """A failure retrying cannot fix and that must not look like success (exit status non-zero)."""


class AuthenticationError(FatalError):
    """An API refused our credentials (HTTP 401 / 403): every further call would fail the same way."""


class EmptyOutputError(FatalError):
    """A stage produced nothing because every item failed, and its config does not allow that."""


class SourceError(FatalError):
    """A data source stayed unusable after retries (e.g. the first page of a venue)."""
