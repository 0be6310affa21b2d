"""PDF text extraction on PDFs the test writes with pymupdf (headings in bold, body in Times)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import polars as pl
import pymupdf
import pytest

from tasks.core.schema import PDF_TEXTS, REJECTS
from tasks.stages.ingest.pdf import PdfError, extract_pdfs, extract_text

WIDTH, HEIGHT, MARGIN = 612, 792, 72


def paragraph(marker: str, sentences: int = 6) -> str:
    """Body text that names its section with `marker` in every sentence."""
    return " ".join(
        f"The {marker} passage discusses point {i} of the argument at some length so lines wrap."
        for i in range(sentences)
    )


def make_pdf(sections: list[tuple[str | tuple[str, str], str]], title: str = "A Study of Things") -> bytes:
    """Lay out (heading, body) pairs over as many pages as needed.

    A heading given as a (number, title) pair puts the number and the title at separate positions
    on the line, as LaTeX does when MuPDF splits them.
    """
    doc = pymupdf.open()
    page = doc.new_page(width=WIDTH, height=HEIGHT)
    y = MARGIN

    def room(height: float) -> None:
        nonlocal page, y
        if y + height > HEIGHT - MARGIN:
            page = doc.new_page(width=WIDTH, height=HEIGHT)
            y = MARGIN

    page.insert_text((MARGIN, y), title, fontname="hebo", fontsize=16)
    y += 30
    for heading, body in sections:
        room(40)
        if isinstance(heading, tuple):
            page.insert_text((MARGIN, y), heading[0], fontname="hebo", fontsize=12)
            page.insert_text((MARGIN + 40, y), heading[1], fontname="hebo", fontsize=12)
        else:
            page.insert_text((MARGIN, y), heading, fontname="hebo", fontsize=12)
        y += 20
        for line in (part for chunk in body.split("\n") for part in textwrap.wrap(chunk, 95)):
            room(14)
            page.insert_text((MARGIN, y), line, fontname="tiro", fontsize=10)
            y += 13
        y += 8
    data = doc.tobytes()
    doc.close()
    return data


NUMBERED = [
    ("Abstract", paragraph("abstractword")),
    ("1 Introduction", paragraph("introword", 10)),
    ("2 Related Work", paragraph("relatedword", 8)),
    ("2.1 Language models as judges", paragraph("subrelatedword", 8)),
    ("3 Method", paragraph("methodword", 14)),
    ("4 Experiments", paragraph("experimentword", 14)),
    ("5 Conclusion", paragraph("conclusionword")),
    ("Acknowledgements", paragraph("thanksword")),
    ("References", paragraph("citationword", 20)),
    ("A Proofs", paragraph("proofword", 10)),
    ("B Additional Experiments", paragraph("extraword", 10)),
]


def test_numbered_paper_drops_tail_sections_and_related_work() -> None:
    pdf = make_pdf(NUMBERED)
    result = extract_text(pdf)
    assert result.page_count == pymupdf.open(stream=pdf, filetype="pdf").page_count > 2
    for kept in ("abstractword", "introword", "relatedword", "subrelatedword", "methodword",
                 "experimentword", "conclusionword", "3 Method"):
        assert kept in result.text
    for dropped in ("thanksword", "citationword", "proofword", "extraword", "Acknowledgements"):
        assert dropped not in result.text
    assert "relatedword" not in result.text_no_related_work
    assert "subrelatedword" not in result.text_no_related_work
    assert "Related Work" not in result.text_no_related_work
    for kept in ("introword", "3 Method", "methodword", "conclusionword"):
        assert kept in result.text_no_related_work


def test_upper_case_unnumbered_headings() -> None:
    pdf = make_pdf(
        [
            ("INTRODUCTION", paragraph("introword", 10)),
            ("BACKGROUND AND RELATED WORK", paragraph("relatedword", 8)),
            ("OUR APPROACH", paragraph("methodword", 10)),
            ("ACKNOWLEDGMENTS", paragraph("thanksword")),
            ("BIBLIOGRAPHY", paragraph("citationword", 10)),
            ("APPENDIX", paragraph("proofword", 10)),
        ]
    )
    result = extract_text(pdf)
    assert "introword" in result.text and "methodword" in result.text
    assert not any(w in result.text for w in ("thanksword", "citationword", "proofword"))
    assert "relatedword" in result.text and "relatedword" not in result.text_no_related_work
    assert "OUR APPROACH" in result.text_no_related_work and "methodword" in result.text_no_related_work


def test_number_set_apart_from_title_and_roman_numerals() -> None:
    split = make_pdf(
        [
            (("1", "Introduction"), paragraph("introword", 10)),
            (("2", "Prior Work"), paragraph("relatedword", 8)),
            (("3", "Method"), paragraph("methodword", 10)),
            (("7", "References"), paragraph("citationword", 10)),
        ]
    )
    result = extract_text(split)
    assert "citationword" not in result.text and "methodword" in result.text
    assert "relatedword" in result.text and "relatedword" not in result.text_no_related_work
    assert "methodword" in result.text_no_related_work

    roman = make_pdf(
        [
            ("I. INTRODUCTION", paragraph("introword", 10)),
            ("II. RELATED WORKS", paragraph("relatedword", 8)),
            ("III. PROPOSED METHOD", paragraph("methodword", 10)),
            ("REFERENCES", paragraph("citationword", 10)),
        ]
    )
    result = extract_text(roman)
    assert "citationword" not in result.text
    assert "relatedword" not in result.text_no_related_work and "methodword" in result.text_no_related_work


def test_no_related_work_section_keeps_both_fields_equal() -> None:
    result = extract_text(make_pdf([("1 Introduction", paragraph("introword", 8)), ("2 Method", paragraph("methodword", 8))]))
    assert result.text == result.text_no_related_work
    assert "introword" in result.text and "methodword" in result.text


def test_lines_of_a_paragraph_are_joined_and_hyphenated_breaks_mended() -> None:
    doc = pymupdf.open()
    page = doc.new_page()
    lines = [paragraph("introword", 1)] * 6 + ["we carefully evaluate the pro-", "posed model on three data-", "Sets."]
    for i, line in enumerate(lines):
        page.insert_text((MARGIN, MARGIN + 13 * i), line, fontname="tiro", fontsize=10)
    result = extract_text(doc.tobytes())
    assert "we carefully evaluate the proposed model on three data- Sets." in result.text
    assert result.text.count("\n") == 0


def test_related_work_mentioned_in_text_is_not_a_heading() -> None:
    intro = paragraph("introword", 4) + " We review related work in the next section. " + paragraph("x", 4)
    result = extract_text(make_pdf([("1 Introduction", intro), ("2 Method", paragraph("methodword", 8))]))
    assert result.text == result.text_no_related_work
    assert "related work in the next section" in result.text


def test_table_of_contents_entries_are_not_headings() -> None:
    contents = "1 Introduction . . . . . . . . . . 1\n2 Related Work . . . . . . . . 2\nReferences\nand notes . . . . . . . . . . 9"
    result = extract_text(make_pdf([("Abstract", paragraph("abstractword", 8)), ("Contents", contents), *NUMBERED[1:]]))
    assert "methodword" in result.text and "citationword" not in result.text
    assert "relatedword" in result.text and "relatedword" not in result.text_no_related_work


def encrypted_pdf() -> bytes:
    doc = pymupdf.open(stream=make_pdf(NUMBERED[:3]), filetype="pdf")
    data = doc.tobytes(encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="secret", owner_pw="owner")
    doc.close()
    return data


def blank_pdf() -> bytes:
    doc = pymupdf.open()
    for _ in range(3):
        page = doc.new_page()
        page.draw_rect(pymupdf.Rect(100, 100, 300, 300), color=(0, 0, 0), fill=(0.5, 0.5, 0.5))
    data = doc.tobytes()
    doc.close()
    return data


@pytest.mark.parametrize(
    ("data", "rule"),
    [
        (b"<html><body>Not found</body></html>", "corrupt_pdf"),
        (b"%PDF-1.7\n" + bytes(range(256)) * 8, "corrupt_pdf"),
        (b"", "corrupt_pdf"),
        ("encrypted", "encrypted_pdf"),
        ("blank", "no_text"),
    ],
)
def test_unreadable_pdfs_raise_pdf_error_with_rule(data: bytes | str, rule: str) -> None:
    data = {"encrypted": encrypted_pdf, "blank": blank_pdf}[data]() if isinstance(data, str) else data
    with pytest.raises(PdfError) as info:
        extract_text(data)
    assert info.value.rule == rule and info.value.detail


def write_venue_pdfs(folder: Path) -> None:
    (folder / "good1.pdf").write_bytes(make_pdf(NUMBERED))
    (folder / "good2.pdf").write_bytes(make_pdf(NUMBERED[:6]))
    (folder / "corrupt.pdf").write_bytes(b"%PDF-1.5\n\x00\x01garbage" * 10)
    (folder / "locked.pdf").write_bytes(encrypted_pdf())
    (folder / "blank.pdf").write_bytes(blank_pdf())


@pytest.mark.parametrize("workers", [1, 2])
def test_extract_pdfs_reports_every_file(tmp_path: Path, workers: int) -> None:
    write_venue_pdfs(tmp_path)
    ids = ["good1", "corrupt", "locked", "good2", "blank", "absent", "good1"]
    texts, rejects = extract_pdfs(tmp_path, ids, workers=workers, venue_id="V/2025")
    assert texts.schema == PDF_TEXTS and rejects.schema == REJECTS
    assert texts["paper_id"].to_list() == ["good1", "good2"]
    assert (texts["n_chars"] == texts["text"].str.len_chars()).all()
    assert texts.filter(pl.col("paper_id") == "good1")["page_count"].item() > 2
    rules = dict(zip(rejects["entity_id"], rejects["rule"], strict=True))
    assert rules == {"corrupt": "corrupt_pdf", "locked": "encrypted_pdf", "blank": "no_text", "absent": "missing_pdf"}
    assert set(rejects["stage"]) == {"ingest"} and set(rejects["entity"]) == {"pdf"}
    assert set(rejects["venue_id"]) == {"V/2025"} and rejects["detail"].is_not_null().all()


def test_extract_pdfs_size_limit_and_empty_input(tmp_path: Path) -> None:
    write_venue_pdfs(tmp_path)
    texts, rejects = extract_pdfs(tmp_path, ["good1"], max_bytes=100)
    assert texts.is_empty() and rejects["rule"].to_list() == ["pdf_too_large"]
    texts, rejects = extract_pdfs(tmp_path, [])
    assert texts.is_empty() and rejects.is_empty() and texts.schema == PDF_TEXTS
