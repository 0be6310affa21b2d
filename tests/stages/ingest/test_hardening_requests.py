"""OpenReview requests bounded in total time: a server that answers at once and then sends a byte
at a time is a timeout after `[ingest] request_total_seconds`, logged, not a request that never ends."""

from __future__ import annotations

import logging
import time

import pytest
import requests

from tasks.core.config import IngestConfig
from tasks.stages.ingest.openreview_client import make_client
from tasks.testing.local_http import trickling_server


@pytest.mark.usefixtures("no_openreview_login")
def test_a_trickling_openreview_server_is_a_timeout_after_the_total_bound(caplog):
    cfg = IngestConfig(timeout_seconds=1.0, request_total_seconds=1.5, max_retries=0)
    with trickling_server(0.3) as url:
        client = make_client(2, url, cfg)
        started = time.monotonic()
        with caplog.at_level(logging.WARNING), pytest.raises(requests.ReadTimeout, match="within 1.5 s"):
            client.get_group("ICLR.cc/2025/Conference")
        took = time.monotonic() - started
    assert took < 4 and "took more than 1.5 s in all" in caplog.text

