"""PDF bombs: megabytes of text compressed into a few kilobytes, thousands of pages, a reader that
runs too long. Each file is read in a child process under memory, time and page limits; a paper
over a limit is one reject naming the limit, and the other papers are read as usual."""

from __future__ import annotations

import time
from pathlib import Path

import pymupdf

from tasks.stages.ingest.pdf import PdfLimits, extract_pdfs
from tests.stages.ingest.test_pdf import NUMBERED, make_pdf


def text_bomb(chars: int) -> bytes:
    """One page whose content stream draws `chars` characters of 1-pt text (deflated: a few KB)."""
    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_text((72, 72), "x", fontsize=1)
    font = page.get_fonts()[0][4]
    line = "(" + "A" * 200 + ") Tj 0 -0.01 Td\n"
    doc.update_stream(page.get_contents()[0], f"BT /{font} 1 Tf 10 800 Td\n{line * (chars // 200)}ET\n".encode())
    return doc.tobytes(deflate=True, garbage=3)


def page_bomb(pages: int) -> bytes:
    doc = pymupdf.open()
    for _ in range(pages):
        doc.new_page(width=50, height=50)
    return doc.tobytes(garbage=3, deflate=True)


def test_a_text_bomb_over_the_memory_limit_is_rejected_and_the_run_goes_on(tmp_path: Path) -> None:
    bomb = text_bomb(2_000_000)
    assert len(bomb) < 64_000     # 2 MB of text in the file's first few kilobytes; ~1.1 GB to read in full
    (tmp_path / "bomb.pdf").write_bytes(bomb)
    (tmp_path / "good.pdf").write_bytes(make_pdf(NUMBERED))
    started = time.monotonic()
    texts, rejects = extract_pdfs(tmp_path, ["bomb", "good"], workers=2,
                                  limits=PdfLimits(memory_mb=600, seconds=60, max_pages=100))
    assert texts["paper_id"].to_list() == ["good"]
    [reject] = rejects.to_dicts()
    assert reject["entity_id"] == "bomb" and reject["rule"] == "pdf_over_limit"
    assert "pdf_memory_mb 600 MB" in reject["detail"]
    assert time.monotonic() - started < 30


def test_too_many_pages_or_too_long_a_read_is_rejected_with_its_limit(tmp_path: Path) -> None:
    (tmp_path / "pages.pdf").write_bytes(page_bomb(3000))
    (tmp_path / "slow.pdf").write_bytes(text_bomb(2_000_000))
    (tmp_path / "good.pdf").write_bytes(make_pdf(NUMBERED))
    started = time.monotonic()
    texts, rejects = extract_pdfs(tmp_path, ["pages", "slow", "good"], workers=1,
                                  limits=PdfLimits(memory_mb=None, seconds=1.0, max_pages=500))
    assert texts["paper_id"].to_list() == ["good"]
    details = dict(zip(rejects["entity_id"], zip(rejects["rule"], rejects["detail"], strict=True), strict=True))
    assert details["pages"] == ("pdf_over_limit", "3000 pages > [ingest] pdf_max_pages 500")
    assert details["slow"][0] == "pdf_over_limit" and "pdf_seconds 1 s" in details["slow"][1]
    assert time.monotonic() - started < 20
