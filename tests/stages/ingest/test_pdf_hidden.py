"""Hidden text in papers: white, tiny, invisible and off-page text is listed per paper and left out
of the text candidates and judges read; a normal PDF and a scan's OCR layer are not flagged."""

from __future__ import annotations

import pymupdf
import pytest

from tasks.stages.ingest.pdf import extract_pdfs, extract_text, hidden_spans
from tasks.testing.synthetic import HIDDEN_INSTRUCTIONS, plant_hidden_text

BODY = ("We study sparse attention for long documents and show that a learned router keeps accuracy while "
        "halving the cost of each layer on three benchmarks. ") * 6


def pdf(plant: bool = False, invisible_only: bool = False) -> bytes:
    doc = pymupdf.open()
    page = doc.new_page(width=612, height=792)
    box = pymupdf.Rect(72, 72, 540, 700)
    page.insert_textbox(box, BODY, fontsize=10, fontname="helv", render_mode=3 if invisible_only else 0)
    if plant:
        plant_hidden_text(page)
    data = doc.tobytes()
    doc.close()
    return data


def test_white_tiny_invisible_and_off_page_text_is_flagged_and_stripped():
    found = extract_text(pdf(plant=True))
    assert sorted(reason for _, reason, _ in found.hidden) == sorted(r for r, _ in HIDDEN_INSTRUCTIONS)
    assert all(page == 1 for page, _, _ in found.hidden)
    for _, instruction in HIDDEN_INSTRUCTIONS:
        assert instruction.split(":")[-1].strip()[:20] not in found.text
    assert "sparse attention" in found.text and found.text == extract_text(pdf()).text
    kept = extract_text(pdf(plant=True), strip_hidden=False)        # [ingest] strip_hidden_text = false
    assert "top rating" in kept.text and len(kept.hidden) == len(found.hidden) and not kept.stripped


def test_a_normal_pdf_and_a_scans_invisible_ocr_layer_are_not_flagged():
    assert extract_text(pdf()).hidden == ()
    scan = extract_text(pdf(invisible_only=True))     # every span invisible: an OCR layer, read as text
    assert scan.hidden == () and "sparse attention" in scan.text


def test_extract_pdfs_records_the_hidden_spans_per_paper(tmp_path):
    (tmp_path / "clean.pdf").write_bytes(pdf())
    (tmp_path / "planted.pdf").write_bytes(pdf(plant=True))
    texts, rejects = extract_pdfs(tmp_path, ["clean", "planted"], workers=1)
    assert rejects.is_empty()
    by_paper = {row["paper_id"]: row for row in texts.iter_rows(named=True)}
    assert by_paper["clean"]["hidden"] == [] and by_paper["clean"]["hidden_stripped"] is True
    reasons = {span["reason"] for span in by_paper["planted"]["hidden"]}
    assert reasons == {"white_text", "tiny_font", "invisible", "off_page"}


@pytest.mark.slow
def test_the_paper_integrity_table_lists_hidden_spans_of_curated_papers(tmp_path):
    import duckdb
    import polars as pl

    from tasks.core import schema
    from tasks.core.config import load_config
    from tasks.stages.materialize.build import build_database

    (tmp_path / "pipelines.toml").write_text("[pipelines.t]\nvenues = ['T.cc/2025/Conference']\n"
                                             "stages = ['ingest', 'curate', 'materialize']\n")
    cfg = load_config(tmp_path / "pipelines.toml")
    base = cfg.data_dir / "t" / "venue"
    (base / "ingest").mkdir(parents=True)
    (base / "curate").mkdir(parents=True)
    (tmp_path / "pdfs").mkdir()
    (tmp_path / "pdfs" / "p1.pdf").write_bytes(pdf(plant=True))
    (tmp_path / "pdfs" / "p2.pdf").write_bytes(pdf())
    texts, _ = extract_pdfs(tmp_path / "pdfs", ["p1", "p2"], workers=1)
    texts.write_parquet(base / "ingest" / "pdf_texts.parquet")
    hidden_spans(texts).write_parquet(base / "ingest" / "paper_integrity.parquet")
    papers = pl.DataFrame({"paper_id": ["p1", "p2"], "venue_id": ["T.cc/2025/Conference"] * 2, "title": ["A", "B"]})
    schema.conform(papers, schema.PAPERS).write_parquet(base / "ingest" / "papers.parquet")
    schema.conform(papers, schema.CURATED_PAPERS).write_parquet(base / "curate" / "papers.parquet")
    build_database(cfg, "t")
    with duckdb.connect(str(cfg.database), read_only=True) as con:
        rows = con.execute("select paper_id, page, reason, stripped from paper_integrity").fetchall()
    assert sorted(r[2] for r in rows) == ["invisible", "off_page", "tiny_font", "white_text"]
    assert {r[0] for r in rows} == {"p1"} and all(r[1] == 1 and r[3] for r in rows)
