"""Ingest against damaged caches, a dead first page, and a second ingest of the same venue at once."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tasks.core.config import Config, IngestConfig
from tasks.core.errors import SourceError
from tasks.core.layout import raw_dir
from tasks.stages.ingest.fetch import ingest_venue
from tasks.stages.ingest.sources import url_source
from tasks.testing.openreview_server import Fault, serve_venues
from tasks.testing.synthetic import make_venue

ROOT = Path(__file__).resolve().parents[3]
VENUE = "GREBench.cc/2025/Demo"
PAGE = 5


def config(root: Path, **ingest) -> Config:
    settings = dict(page_size=PAGE, backoff_seconds=0.01, max_backoff_seconds=0.05, timeout_seconds=5,
                    max_retries=2, pdf=False)
    return Config(root=root, ingest=IngestConfig(**{**settings, **ingest}))


@pytest.fixture(scope="module")
def server():
    with serve_venues([make_venue(VENUE, n_papers=12)], page_limit=PAGE) as srv:
        yield srv


def _papers(out: Path) -> pl.DataFrame:
    return pl.read_parquet(out / "papers.parquet")


DAMAGE = {
    "truncated": lambda b: b[: len(b) // 2],
    "empty": lambda b: b"",
    "binary": lambda b: bytes(range(256)) * 4,
    "wrong_shape": lambda b: b'{"message": "unexpected"}',
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_bad_raw_page_is_quarantined_refetched_and_named_in_one_line(server, tmp_path, damage, caplog):
    cfg = config(tmp_path)
    first = ingest_venue(VENUE, cfg, tmp_path / "out", server.v2_url)
    reference = _papers(tmp_path / "out")
    page = sorted(raw_dir(cfg, VENUE, 2, url_source(server.v2_url)).rglob("offset_00000005.json"))[0]
    page.write_bytes(DAMAGE[damage](page.read_bytes()))
    server.clear()
    with caplog.at_level(logging.WARNING, logger="tasks.stages.ingest.fetch"):
        again = ingest_venue(VENUE, cfg, tmp_path / "out", server.v2_url)
    assert (again.pages_fetched, again.pages_cached) == (1, first.pages_fetched - 1)
    assert _papers(tmp_path / "out").equals(reference)
    [line] = [r.getMessage() for r in caplog.records if "quarantined" in r.getMessage()]
    assert str(page) in line and "\n" not in line
    [aside] = (raw_dir(cfg, VENUE, 2, url_source(server.v2_url)) / "quarantine").iterdir()
    assert aside.name.startswith(page.parent.name)


@pytest.mark.parametrize("damage", ["truncated", "empty", "binary"])
def test_bad_group_json_is_quarantined_and_refetched(server, tmp_path, damage, caplog):
    cfg = config(tmp_path)
    ingest_venue(VENUE, cfg, tmp_path / "out", server.v2_url)
    group = raw_dir(cfg, VENUE, 2, url_source(server.v2_url)) / "group.json"
    group.write_bytes(DAMAGE[damage](group.read_bytes()))
    with caplog.at_level(logging.WARNING, logger="tasks.stages.ingest.fetch"):
        ingest_venue(VENUE, cfg, tmp_path / "out", server.v2_url)
    assert any(str(group) in r.getMessage() for r in caplog.records)
    assert group.is_file() and (raw_dir(cfg, VENUE, 2, url_source(server.v2_url)) / "quarantine").is_dir()


def test_persistently_malformed_first_page_is_an_error(server, tmp_path):
    server.clear()
    server.inject(Fault("malformed", times=99, when=lambda p: p.get("offset") in (None, "0")))
    try:
        with pytest.raises(SourceError, match="first page"):
            ingest_venue(VENUE, config(tmp_path), tmp_path / "out", server.v2_url)
    finally:
        server.clear()
    assert not (tmp_path / "out" / "papers.parquet").exists()


SCRIPT = """
import sys
from pathlib import Path
from tasks.core.config import Config, IngestConfig
from tasks.stages.ingest.fetch import ingest_venue
root = Path(sys.argv[1])
cfg = Config(root=root, ingest=IngestConfig(page_size=5, pdf=True, pdf_workers=2, timeout_seconds=10))
r = ingest_venue('GREBench.cc/2025/Demo', cfg, root / 'out', sys.argv[2])
print(r.papers, r.pdfs, r.pdf_texts)
"""


@pytest.mark.slow
def test_two_ingests_with_pdfs_at_once_do_not_clash(server, tmp_path):
    server.clear()
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path), server.v2_url], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=120) for p in procs]
    for proc, (_out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err[-2000:]
    assert outputs[0][0] == outputs[1][0]
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.endswith(".tmp")]
    assert _papers(tmp_path / "out").height > 0


def hostile_ids(venue, outside: Path):
    """`venue` with every paper id, and the id of every review edited after posting, a path into
    `outside` (`../../../../tmp/x/pwn0`), as a hostile server sends them."""
    up = "../" * 30 + str(outside).lstrip("/")
    renamed = {}
    for i, paper in enumerate(venue.papers):
        renamed[paper.paper_id] = paper.paper_id = f"{up}/pwn{i}"
        for k, review in enumerate(paper.reviews):
            if review.edits:
                renamed[review.review_id] = review.review_id = f"{up}/rev{i}_{k}"
    venue.revised = {kind: [renamed.get(i, i) for i in ids] for kind, ids in venue.revised.items()}
    return venue


def test_path_like_ids_from_a_server_never_write_outside_the_data_folder(tmp_path):
    outside = tmp_path / "outside"
    venue = hostile_ids(make_venue(VENUE, n_papers=6, seed=5, bad_cases=False), outside)
    assert any(r.edits for p in venue.papers for r in p.reviews)   # review histories are read too
    with serve_venues([venue], page_limit=PAGE) as srv:
        cfg = config(tmp_path / "project", pdf=True, versions=True, pdf_workers=2)
        result = ingest_venue(VENUE, cfg, tmp_path / "project" / "out", srv.v2_url)
    assert not outside.exists(), sorted(outside.rglob("*"))
    assert result.pdfs > 0 and result.pdf_texts == result.pdfs and result.histories_fetched > 0
    texts = pl.read_parquet(tmp_path / "project" / "out" / "pdf_texts.parquet")
    assert set(texts["paper_id"]) <= {p.paper_id for p in venue.papers}   # kept under their own ids
    written = [p for p in (tmp_path / "project").rglob("*") if p.is_file()]
    pdfs = [p for p in written if p.suffix == ".pdf"]
    histories = [p for p in written if p.parent.name == "history"]
    assert len(pdfs) == result.pdfs and histories
    for path in pdfs + histories:
        assert path.name.startswith("tmp_") and ".." not in path.name and len(path.name) < 120, path

