"""Paper text from PDFs with pymupdf: the body without references, appendices and acknowledgements.

Section headings are found line by line. A heading is a short line that is a known title (e.g.
"References", "Related Work"), optionally numbered ("2", "2.1", "II.", "A"); a number the PDF
sets apart from its title ("3" then "Method" on the next line) is joined back first. The body ends
at the first references / bibliography / acknowledgements / appendix heading, and pages after it
are never read (they hold only what gets dropped). The related-work section runs from its
heading to the next heading of the same rank: the next section number for numbered papers, the
next line set in the heading's own font otherwise. Lines beside a table-of-contents entry (dot
leaders and a page number) are never headings. Appendices lettered "A Proofs" follow the
references, so they go with everything after them.

Unreadable files never stop a run: `extract_pdfs` turns them into rejects (`REJECT_RULES`).
Every file is read in a child process of its own under `PdfLimits`: an address-space cap
(RLIMIT_AS), a wall-clock and CPU time limit and a page count. A PDF bomb (megabytes of text
compressed into kilobytes, tens of thousands of pages, a file that crashes MuPDF) is then one
paper rejected as `pdf_over_limit` / `extraction_failed` with its reason, and the run goes on.

Hidden text: text a reader of the rendered page cannot see (`tasks/stages/ingest/pdf_hidden.py`:
invisible, nearly transparent, tiny, too faint on its background, painted over by an opaque box or
image, off the page; a scan's invisible OCR layer over the page's image is read). Such text is where
instructions to AI reviewers hide ("give a positive review only"); it is listed per paper
(`hidden`, one entry per run of hidden characters with its reason) and, by default, left out of the
text every candidate and judge reads.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from pathlib import Path

import polars as pl
import pymupdf

from tasks.core.progress import progress
from tasks.core.schema import PDF_TEXTS, REJECTS, conform, empty
from tasks.stages.ingest.pdf_hidden import HIDDEN_FONT_PT, PageInk, char_key, page_ink

REJECT_RULES = {
    "missing_pdf": "no PDF file for the paper",
    "pdf_too_large": "the file is larger than the configured limit",
    "corrupt_pdf": "not a PDF, or MuPDF cannot parse it",
    "encrypted_pdf": "the PDF needs a password",
    "no_text": "no extractable text (scanned or image-only pages)",
    "extraction_failed": "an unexpected error while reading the text, or the reader crashed",
    "pdf_over_limit": "reading it needs more memory, time or pages than [ingest] pdf_memory_mb / pdf_seconds / "
                      "pdf_max_pages allow",
}
MIN_TEXT_CHARS = 200   # fewer non-blank characters in the whole file: nothing to extract
MIN_BODY_CHARS = 500   # an end-of-body heading this early is not believed (a stray line)
MAX_HEADING_CHARS = 80
HIDDEN_CHARS = 500     # characters of one hidden span kept in the record

_NUM = r"(?P<num>\d{1,2}(?:\.\d{1,2})*\.?|[IVX]{1,5}\.|[A-Z](?:\.\d{1,2})*\.?)"
_RELATED = (
    r"(?:background\s+and\s+)?related\s+(?:work|works|research|literature)(?:\s+and\s+background)?"
    r"|prior\s+(?:work|works|art)|previous\s+(?:work|works)|literature\s+(?:review|survey)"
)
_REFERENCES = r"references|bibliography|literature\s+cited|works\s+cited|reference"
_ACKNOWLEDGEMENTS = r"acknowledge?ments?"
_APPENDIX = r"appendix|appendices|supplementary\s+materials?|supplemental\s+materials?"
_TRAIL = r"\s*[:.]?"


def _heading(titles: str, label: bool = False) -> re.Pattern[str]:
    """A whole line: optional section number, one of `titles`, an optional "A" / "A: Proofs" label."""
    tail = r"(?:\s+(?P<label>[A-Z0-9]{1,3}\b))?(?:(?:\s*[:.\-\u2013\u2014]\s*|\s+)(?P<rest>\S.*))?"
    tail = tail if label else _TRAIL
    return re.compile(rf"^(?:{_NUM}\s*)?(?P<title>{titles}){tail}$", re.IGNORECASE)


RELATED_RE = _heading(_RELATED)
END_RES = {
    "references": _heading(_REFERENCES),
    "acknowledgements": _heading(_ACKNOWLEDGEMENTS),
    "appendix": _heading(_APPENDIX, label=True),
}
NUMBERED_RE = re.compile(rf"^{_NUM}\s*(?P<title>\S.*)$")
BARE_NUMBER_RE = re.compile(rf"^{_NUM}$")
TOC_ENTRY_RE = re.compile(r"(?:\.\s?){4,}\s*\d+$")   # "Method . . . . . . 4": a table-of-contents line
ROMAN = {"I": 1, "V": 5, "X": 10}
_OUT_OF_MEMORY = re.compile(r"malloc|out of memory|cannot allocate|calloc|realloc", re.IGNORECASE)


@dataclass(frozen=True)
class PdfLimits:
    """What reading one PDF may take: address space (MB), wall-clock seconds, pages; None: no limit."""

    memory_mb: int | None = 2048
    seconds: float | None = 120.0
    max_pages: int | None = 2000


class PdfError(ValueError):
    """A PDF that cannot give text; `rule` is one of REJECT_RULES."""

    def __init__(self, rule: str, detail: str) -> None:
        super().__init__(f"{rule}: {detail}")
        self.rule = rule
        self.detail = detail


@dataclass(frozen=True)
class PdfText:
    page_count: int
    text: str                     # body without references, appendices, acknowledgements
    text_no_related_work: str     # the same without the related-work section
    hidden: tuple[tuple[int, str, str], ...] = ()   # (page, reason, text) of each hidden span
    stripped: bool = True                          # hidden spans left out of the texts


@dataclass(frozen=True)
class _Line:
    text: str
    block: int
    style: tuple[float, bool]     # (font size to 0.5 pt, bold) of the line's first span


def _kept_spans(spans: list[dict], reasons: dict, page: int, hidden: list[tuple[int, str, str]] | None,
                strip: bool) -> list[dict]:
    """The spans of one `get_text("rawdict")` line with their hidden characters listed in `hidden` (a run
    of hidden characters, with the blanks inside it, is one entry) and, with `strip`, left out."""
    kept = []
    for span in spans:
        text, run, run_reason = [], [], None
        for char in [*span["chars"], None]:
            reason = reasons.get(char_key(char["c"], char["origin"])) if char else None
            if char and reason is None and run_reason and not char["c"].strip():
                reason = run_reason                    # a blank inside a hidden run belongs to it
            if reason != run_reason and run:
                if hidden is not None and "".join(run).strip():
                    hidden.append((page, run_reason, "".join(run).strip()[:HIDDEN_CHARS]))
                run = []
            run_reason = reason
            if char and reason:
                run.append(char["c"])
            if char and (reason is None or not strip):
                text.append(char["c"])
        kept.append({**span, "text": "".join(text)})
    return kept


def _painted(spans: list[dict], ink: PageInk, page: int, hidden: list[tuple[int, str, str]] | None,
             strip: bool) -> list[dict]:
    """`spans` less those extracted but never painted (`invisible`): text in render mode 7 only adds
    to the clip path, so MuPDF's paint trace never sees it and its spans read alpha 0; and less those
    its text matrix flattens (`tiny_font`: `1 0 0 0.05 x y Tm` draws 20-point text 1 point high, which
    the paint trace still sizes as 20 points), judged by the height the extracted span renders at.
    A span of characters the trace already judged is left to `_kept_spans`."""
    kept = []
    for span in spans:
        chars = span.get("chars")
        text = "".join(c["c"] for c in chars) if chars is not None else span["text"]
        judged = chars is not None and any(char_key(c["c"], c["origin"]) in ink.reasons for c in chars)
        reason = "invisible" if span.get("alpha", 255) == 0 else "tiny_font" if _squeezed(span, ink) else None
        if reason is None or judged or not text.strip():
            kept.append(span)
            continue
        if hidden is not None:
            hidden.append((page, reason, text.strip()[:HIDDEN_CHARS]))
        if not strip:
            kept.append(span)
    return kept


def _squeezed(span: dict, ink: PageInk) -> bool:
    """The span's em renders lower than HIDDEN_FONT_PT (or smaller both ways): its extracted size is
    the square root of the em's rendered width times its height (MuPDF's font size times the square
    root of the text matrix's determinant) and the paint trace gives the width (`PageInk.widths`, by
    the span's first character; the size where the trace does not list it), so the height is the
    size squared over the width. Where no em on the page is that wide, the widths are not looked up.
    Its box is not used: a font without ascender and descender gives a flat box at any size."""
    size = span["size"]
    if size < HIDDEN_FONT_PT:
        return True
    if size * size >= HIDDEN_FONT_PT * ink.widest:
        return False
    chars = span.get("chars")
    first = chars[0] if chars else {"c": span.get("text", "")[:1], "origin": span["origin"]}
    width = ink.widths.get(char_key(first["c"], first["origin"]), size)
    return size * size < HIDDEN_FONT_PT * width


def _page_lines(page: pymupdf.Page, block_offset: int, hidden: list[tuple[int, str, str]] | None = None,
                strip: bool = True) -> list[_Line]:
    """The page's text lines; hidden text is appended to `hidden` and, with `strip`, left out."""
    ink = page_ink(page)
    if hidden is not None:
        hidden += [(page.number + 1, "off_page", text[:HIDDEN_CHARS]) for text in ink.off_page]
    mode = "rawdict" if ink.reasons else "dict"   # characters only where some are hidden
    blocks = page.get_text(mode, flags=pymupdf.TEXTFLAGS_TEXT)["blocks"]
    lines = []
    for b, block in enumerate(blocks):
        for line in block.get("lines", ()):
            number = page.number + 1
            spans = line["spans"] if ink.ocr_layer else _painted(line["spans"], ink, number, hidden, strip)
            kept = _kept_spans(spans, ink.reasons, page.number + 1, hidden, strip) if ink.reasons else spans
            spans = [s for s in kept if s["text"].strip()]
            if not spans:
                continue
            text = " ".join("".join(s["text"] for s in kept).split())
            first = spans[0]
            bold = bool(first["flags"] & 16) or "bold" in first["font"].lower()
            lines.append(_Line(text, block_offset + b, (round(first["size"] * 2) / 2, bold)))
    return lines


def _candidate(lines: list[_Line], i: int) -> str:
    """Line i as a heading candidate, with a bare section number joined to the title after it."""
    text = lines[i].text
    if BARE_NUMBER_RE.match(text) and i + 1 < len(lines):
        return f"{text} {lines[i + 1].text}"
    return text


def _in_toc(lines: list[_Line], i: int) -> bool:
    """Line i sits in a table of contents (a neighbour ends in dot leaders and a page number)."""
    return any(TOC_ENTRY_RE.search(lines[j].text) for j in (i - 1, i, i + 1, i + 2) if 0 <= j < len(lines))


def _looks_like_heading(text: str) -> bool:
    """Short, and its first letter is a capital."""
    if len(text) > MAX_HEADING_CHARS:
        return False
    first = next((c for c in text if c.isalpha()), "")
    return first.isupper()


def _body_style(lines: list[_Line]) -> tuple[float, bool] | None:
    """The style that sets the most characters: the running text."""
    weights: Counter[tuple[float, bool]] = Counter()
    for line in lines:
        weights[line.style] += len(line.text)
    return weights.most_common(1)[0][0] if weights else None


def _body_end(lines: list[_Line], start: int, chars: int, body_style: tuple[float, bool] | None) -> int | None:
    """Index of the first references / acknowledgements / appendix heading at or after `start`.

    `chars` counts the characters before `start`. A heading with more than the bare title
    ("Appendix A: Proofs") must be set apart from the running text by its font.
    """
    for i in range(start, len(lines)):
        text = _candidate(lines, i)
        if chars >= MIN_BODY_CHARS and _looks_like_heading(text) and not _in_toc(lines, i):
            for pattern in END_RES.values():
                match = pattern.match(text)
                if not match:
                    continue
                bare = not (match.groupdict().get("label") or match.groupdict().get("rest"))
                if bare or lines[i].style != body_style:
                    return i
        chars += len(lines[i].text)
    return None


def _number(token: str | None) -> tuple[int, ...] | None:
    """"2.1" -> (2, 1); "III." -> (3,); a single letter (appendix style) -> None."""
    if not token:
        return None
    token = token.rstrip(".")
    if token.replace(".", "").isdigit():
        return tuple(int(part) for part in token.split("."))
    if re.fullmatch(r"[IVX]+", token):
        values = [ROMAN[c] for c in token]
        return (sum(-v if i + 1 < len(values) and v < values[i + 1] else v for i, v in enumerate(values)),)
    return None


def _is_successor(q: tuple[int, ...], p: tuple[int, ...]) -> bool:
    """q is the next section at p's rank or above: after 2.3 come 2.4 or 3."""
    return any(q[:k] == p[:k] and len(q) == k + 1 and q[k] == p[k] + 1 for k in range(len(p)))


def _related_span(lines: list[_Line], body_style: tuple[float, bool] | None) -> tuple[int, int] | None:
    """[start, end) line indices of the related-work section, heading included."""
    for i in range(len(lines)):
        text = _candidate(lines, i)
        match = RELATED_RE.match(text) if _looks_like_heading(text) and not _in_toc(lines, i) else None
        if not match:
            continue
        number = _number(match.group("num"))
        style = lines[i + 1].style if text != lines[i].text else lines[i].style
        skip = 2 if text != lines[i].text else 1
        for j in range(i + skip, len(lines)):
            candidate = _candidate(lines, j)
            if not _looks_like_heading(candidate):
                continue
            if number is not None:
                found = NUMBERED_RE.match(candidate)
                q = _number(found.group("num")) if found else None
                if q and _is_successor(q, number) and (
                    lines[j].style != body_style or not candidate.endswith(".")
                ):
                    return i, j
            elif style != body_style and lines[j].style == style:
                return i, j
        return i, len(lines)
    return None


def _render(lines: list[_Line]) -> str:
    """Lines back to text: a block's lines joined into one paragraph, hyphenated breaks mended."""
    paragraphs: list[str] = []
    current: list[str] = []
    block = None
    for line in lines:
        if line.block != block and current:
            paragraphs.append(" ".join(current))
            current = []
        block = line.block
        if current and current[-1].endswith("-") and line.text[:1].islower() and current[-1][-2:-1].isalpha():
            current[-1] = current[-1][:-1] + line.text
        else:
            current.append(line.text)
    if current:
        paragraphs.append(" ".join(current))
    return "\n".join(paragraphs).replace("\x00", "")


def extract_text(pdf: bytes, strip_hidden: bool = True, max_pages: int | None = None) -> PdfText:
    """The paper body of one PDF, hidden text listed (and left out with `strip_hidden`); raises
    PdfError (corrupt_pdf, encrypted_pdf, no_text, pdf_over_limit for more than `max_pages` pages)."""
    if b"%PDF-" not in pdf[:1024]:
        raise PdfError("corrupt_pdf", f"not a PDF (starts with {pdf[:16]!r})")
    pymupdf.TOOLS.mupdf_display_errors(False)
    pymupdf.TOOLS.mupdf_display_warnings(False)
    try:
        doc = pymupdf.open(stream=pdf, filetype="pdf")
    except Exception as error:  # MuPDF raises several types for damaged files
        raise PdfError("corrupt_pdf", f"MuPDF cannot open it: {error}") from None
    with doc:
        if doc.needs_pass:
            raise PdfError("encrypted_pdf", "password protected")
        page_count = doc.page_count
        if max_pages is not None and page_count > max_pages:
            raise PdfError("pdf_over_limit", f"{page_count} pages > [ingest] pdf_max_pages {max_pages}")
        lines: list[_Line] = []
        hidden: list[tuple[int, str, str]] = []
        weights: Counter[tuple[float, bool]] = Counter()
        chars, total, end, number = 0, 0, None, 0
        try:
            for number in range(page_count):
                start = max(len(lines) - 1, 0)  # a bare section number may end the previous page
                for line in _page_lines(doc[number], number * 100_000, hidden, strip_hidden):
                    weights[line.style] += len(line.text)
                    total += len(line.text)
                    lines.append(line)
                body_style = weights.most_common(1)[0][0] if weights else None
                end = _body_end(lines, start, chars, body_style)
                if end is not None:
                    break
                chars = total - len(lines[-1].text) if lines else 0
        except MemoryError:
            raise
        except Exception as error:
            if _OUT_OF_MEMORY.search(str(error)):
                raise MemoryError(str(error)) from None
            raise PdfError("corrupt_pdf", f"page {number + 1} unreadable: {error}") from None
    n_chars = sum(len(line.text.replace(" ", "")) for line in lines)
    if n_chars < MIN_TEXT_CHARS:
        raise PdfError("no_text", f"{n_chars} characters of text on {page_count} page(s)")
    body = lines[:end] if end is not None else lines
    span = _related_span(body, _body_style(body))
    no_related = body[: span[0]] + body[span[1] :] if span else body
    return PdfText(page_count, _render(body), _render(no_related), tuple(hidden), strip_hidden)


PAPER_INTEGRITY = pl.Schema({"paper_id": pl.String, "page": pl.Int32, "reason": pl.String, "text": pl.String,
                             "stripped": pl.Boolean})


def hidden_spans(texts: pl.DataFrame) -> pl.DataFrame:
    """PAPER_INTEGRITY: one row per hidden span of a `pdf_texts` frame (`paper_integrity.parquet`)."""
    if texts.is_empty() or "hidden" not in texts.columns:
        return pl.DataFrame(schema=PAPER_INTEGRITY)
    spans = (texts.select("paper_id", "hidden", pl.col("hidden_stripped").alias("stripped"))
             .explode("hidden").drop_nulls("hidden").unnest("hidden"))
    return spans.select(PAPER_INTEGRITY.names()).cast(dict(PAPER_INTEGRITY)).sort("paper_id", "page", "reason", "text")


def _extract_file(path: str, max_bytes: int | None, strip_hidden: bool = True, max_pages: int | None = None
                  ) -> tuple[PdfText | None, str | None, str | None]:
    """(text, None, None) or (None, rule, detail) for one file; never raises (but MemoryError)."""
    file = Path(path)
    try:
        if not file.is_file():
            return None, "missing_pdf", f"{file.name} not found"
        size = file.stat().st_size
        if max_bytes is not None and size > max_bytes:
            return None, "pdf_too_large", f"{size} bytes > limit {max_bytes}"
        return extract_text(file.read_bytes(), strip_hidden, max_pages), None, None
    except PdfError as error:
        return None, error.rule, error.detail
    except MemoryError:
        raise
    except Exception as error:  # a bug or an exotic file must not stop the other papers
        return None, "extraction_failed", f"{type(error).__name__}: {error}"[:500]


def _child(path: str, max_bytes: int | None, strip_hidden: bool, limits: PdfLimits, out: Connection) -> None:
    """In the child: cap its address space and CPU time, read one file, send the result."""
    import resource

    if limits.memory_mb is not None:
        cap = limits.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    if limits.seconds is not None:
        cpu = int(limits.seconds) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    try:
        result = _extract_file(path, max_bytes, strip_hidden, limits.max_pages)
    except MemoryError:
        result = None, "pdf_over_limit", f"reading it needs more than [ingest] pdf_memory_mb {limits.memory_mb} MB"
    out.send(result)
    out.close()


def extract_limited(path: str, max_bytes: int | None, strip_hidden: bool, limits: PdfLimits
                    ) -> tuple[PdfText | None, str | None, str | None]:
    """`_extract_file` in a child process under `limits` (module docstring); never raises but on an
    interrupt, which ends the child first."""
    context = _pool_context()
    reader, writer = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(path, max_bytes, strip_hidden, limits, writer), daemon=True,
                            name="grebench-pdf")
    child.start()
    writer.close()
    try:
        if reader.poll(limits.seconds):
            try:
                return reader.recv()
            except (EOFError, OSError):
                pass   # the child died before it answered: said below
        else:
            return None, "pdf_over_limit", f"reading it took more than [ingest] pdf_seconds {limits.seconds:g} s"
        child.join(5)
        code = child.exitcode
        if code is not None and code < 0:
            import signal

            name = signal.Signals(-code).name
            if -code == signal.SIGXCPU:
                return None, "pdf_over_limit", f"reading it took more than [ingest] pdf_seconds {limits.seconds:g} s of CPU"
            return None, "extraction_failed", f"the PDF reader crashed ({name})"
        return None, "extraction_failed", f"the PDF reader ended without an answer (exit {code})"
    finally:
        reader.close()
        if child.is_alive():
            child.kill()
        child.join(5)


def _pool_context() -> BaseContext:
    """Children forked from a server that has imported this module once (pymupdf takes ~3 s to
    import), so later children start at once; unlike plain fork it is safe in a threaded parent."""
    context = get_context("forkserver")
    context.set_forkserver_preload([__name__])
    return context


def default_workers(n_files: int) -> int:
    """One child at a time for a single file, else one per core (at most 8)."""
    return max(1, min(n_files, os.cpu_count() or 1, 8))


def extract_pdfs(
    pdf_dir: Path,
    paper_ids: list[str],
    workers: int | None = None,
    max_bytes: int | None = None,
    venue_id: str | None = None,
    strip_hidden: bool = True,
    limits: PdfLimits | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(pdf_texts, rejects) for `pdf_dir/<paper_id>.pdf`, each file read in a child process under
    `limits`; rejects have stage "ingest", entity "pdf"."""
    from tasks.core.layout import id_path  # not in the children's preload: they get paths

    ids = list(dict.fromkeys(paper_ids))
    paths = [str(id_path(Path(pdf_dir), paper_id, ".pdf")) for paper_id in ids]
    workers = default_workers(len(ids)) if workers is None else workers
    limits = limits or PdfLimits()
    results = []
    with progress(len(paths), "PDF text" + (f" of {venue_id}" if venue_id else ""), "pdf") as bar, \
            ThreadPoolExecutor(workers, thread_name_prefix="grebench-pdf") as pool:
        for result in pool.map(lambda path: extract_limited(path, max_bytes, strip_hidden, limits), paths):
            results.append(result)
            bar.update(1)
    texts, rejected = [], []
    for paper_id, (text, rule, detail) in zip(ids, results, strict=True):
        if text is None:
            rejected.append(
                {"stage": "ingest", "entity": "pdf", "entity_id": paper_id, "paper_id": paper_id,
                 "venue_id": venue_id, "rule": rule, "detail": detail}
            )
        else:
            texts.append(
                {"paper_id": paper_id, "page_count": text.page_count, "text": text.text,
                 "text_no_related_work": text.text_no_related_work, "n_chars": len(text.text),
                 "hidden": [{"page": p, "reason": r, "text": t} for p, r, t in text.hidden],
                 "hidden_stripped": text.stripped}
            )
    frame = conform(pl.DataFrame(texts, schema=PDF_TEXTS), PDF_TEXTS) if texts else empty(PDF_TEXTS)
    rejects = conform(pl.DataFrame(rejected, schema=REJECTS), REJECTS) if rejected else empty(REJECTS)
    return frame, rejects
