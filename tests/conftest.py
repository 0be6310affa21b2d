"""Shared fixtures. Heavy things (the embedded LM, Prefect's test server) are session-scoped."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def prefect_harness():
    """Prefect's ephemeral test server, started once; flow tests request this fixture."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def embedded_lm():
    """(model, tokenizer) of the embedded SmolLM2, loaded once for the whole session."""
    from tasks.lm import ModelSpec, load_model

    return load_model(ModelSpec())
