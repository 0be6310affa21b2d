"""Hidden text on a PDF page: which characters a reader of the rendered page cannot see, and why.

A character is hidden (`PageInk.reasons`) when it is
- drawn invisibly: render mode 3 or opacity 0 (`invisible`), or nearly so: opacity below
  `MIN_OPACITY` (`transparent`);
- set below `HIDDEN_FONT_PT` (`tiny_font`);
- too close in colour to what lies under it: a WCAG contrast ratio below `MIN_CONTRAST` between its
  colour (blended by its opacity) and the background, which is the last opaque filled shape drawn
  beneath it, else the white page (`white_text` for white on white, `low_contrast` otherwise);
- painted over later by an opaque filled rectangle or an opaque stroke wide enough to cover it
  (`covered_by_shape`: a straight, axis-aligned segment paints a band of the line's width) or by
  an opaque image (`covered_by_image`) that covers at least `COVER_SHARE` of it;
- drawn over an image and not shown by the rendered page (`low_contrast`: inside its box the
  rendered pixels are one colour to the eye, as black text on a black photo renders);
- painted over later by what only rendering can judge, an opaque filled path that is no rectangle
  (a closed `m`/`l` polygon, a curve) or an image with an alpha channel, when the rendered page
  shows nothing of it (`covered_by_shape`, `covered_by_image`);
- flattened by its text matrix, in one direction or both, so that an em renders narrower or lower
  than `HIDDEN_FONT_PT` (`tiny_font`): across (`0.01 0 0 1 x y Tm`), by the paint trace's size, which
  is the matrix's scale along the baseline, an em's rendered width (`PageInk.widths`); up
  (`1 0 0 0.01 x y Tm`), by the rendered height, the extracted span's size (the square root of the
  matrix's determinant, width times height) squared over that width, judged where the text is read
  (`pdf._painted`);
- or drawn entirely outside the page (`PageInk.off_page`).

Text in render mode 7 (added to the clip path, never painted) is missing from the paint trace
altogether; the text reader drops it as `invisible` (`pdf._painted`).

Paint order comes from MuPDF's sequence numbers: `Page.get_texttrace` numbers every text span,
`Page.get_bboxlog` lists every paint operation in that same numbering, and `Page.get_drawings`
gives a path's fill colour and opacity by its number.

A scan's OCR layer is text drawn invisibly with an image of the page: a page whose every span is
invisible and that shows an image over at least `OCR_IMAGE_SHARE` of its area is read as text. A
page of invisible text with no such image is an injection: all of it is hidden.

Limits: only text over an image is judged on the rendered page (the rest by geometry and
colour, so a page of figures is never rendered whole); a gradient (shading) is not a background,
nor a slanted or curved stroke; a filled rectangle drawn with a blend mode (a highlight flattened
into the content) counts as opaque, while highlight annotations are skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, lru_cache

import pymupdf

HIDDEN_FONT_PT = 4.0    # text set smaller than this is not meant to be read (footnotes are 7-8 pt)
MIN_OPACITY = 0.1       # text more transparent than this is not meant to be read
MIN_CONTRAST = 1.5      # WCAG contrast ratio below which text is not meant to be read (#CCCCCC on white: 1.6)
WHITE_CHANNEL = 0xF0    # a colour whose red, green and blue are all at least this is white
COVER_OPACITY = 0.9     # a later fill at least this opaque hides what it covers
COVER_SHARE = 0.8       # ... when it covers at least this share of a character's box
OCR_IMAGE_SHARE = 0.5   # an image over at least this share of the page can carry an OCR layer
BAND = 32.0             # points: height of the bands text boxes are filed by
CELL = 32.0             # points: side of the grid cells fills are filed by
RENDER_ZOOM = 2.0       # pixels per point where text over an image is judged on the rendered page
ON_IMAGE = "on_image"   # `_char_reason`: the background is an image; rendering decides
# `_char_reason`: painted over later by a fill only rendering can judge -> the reason when it hides
RENDERED_COVER = {"render:shape": "covered_by_shape", "render:image": "covered_by_image"}

WHITE = (1.0, 1.0, 1.0)
Key = tuple[str, float, float]          # (character, origin x, origin y), as in get_text("rawdict")
Box = tuple[float, float, float, float]
_TRANSPARENT_MARKUP = (pymupdf.PDF_ANNOT_HIGHLIGHT, pymupdf.PDF_ANNOT_UNDERLINE, pymupdf.PDF_ANNOT_STRIKE_OUT,
                       pymupdf.PDF_ANNOT_SQUIGGLY)


@dataclass(frozen=True)
class PageInk:
    """What on one page cannot be seen."""

    reasons: dict[Key, str]      # hidden characters, by `char_key`
    off_page: tuple[str, ...]    # text of the spans drawn outside the page
    ocr_layer: bool              # every span invisible, over an image of the page: a scan's text
    visible: tuple[dict, ...] = ()   # the paint trace's spans of text drawn visibly, for `widths`

    @cached_property
    def widest(self) -> float:
        """Points: the widest em of the visible text (0 without any)."""
        return max((span["size"] for span in self.visible), default=0.0)

    @cached_property
    def widths(self) -> dict[Key, float]:
        """An em's rendered width (points; the paint trace's size) of each visible character, by
        `char_key`; built when first asked for (a page's every character)."""
        return {char_key(chr(char[0]), char[2]): span["size"] for span in self.visible for char in span["chars"]}


@dataclass(frozen=True)
class _Fill:
    seqno: int
    box: Box
    color: tuple[float, float, float] | None   # None: an image (colour unknown)
    exact: bool = True   # covers all of `box`; False: a polygon, a curve, an image with alpha (render it)


def char_key(char: str, origin: tuple[float, float]) -> Key:
    """The key of a character in `PageInk.reasons`."""
    return char, round(origin[0], 1), round(origin[1], 1)


def rgb(color: tuple[float, ...] | None) -> tuple[float, float, float]:
    """A gray, RGB or CMYK colour as RGB in [0, 1]; black when unknown."""
    if not color:
        return 0.0, 0.0, 0.0
    if len(color) == 1:
        return color[0], color[0], color[0]
    if len(color) == 4:
        c, m, y, k = color
        return 1 - min(1.0, c + k), 1 - min(1.0, m + k), 1 - min(1.0, y + k)
    return color[0], color[1], color[2]


def _luminance(color: tuple[float, float, float]) -> float:
    """WCAG relative luminance."""
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in color]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a: tuple[float, float, float], b: tuple[float, float, float]) -> float:
    """WCAG contrast ratio of two colours: 1 (same) to 21 (black on white)."""
    la, lb = _luminance(a), _luminance(b)
    return (max(la, lb) + 0.05) / (min(la, lb) + 0.05)


def is_white(color: tuple[float, float, float]) -> bool:
    return all(round(c * 255) >= WHITE_CHANNEL for c in color)


def _intersects(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _same_box(a: Box, b: Box) -> bool:
    return max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1


def _area(box: Box) -> float:
    return max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])


def _covers(fill: Box, box: Box) -> bool:
    """`fill` covers at least COVER_SHARE of `box` (its centre, for a box without area)."""
    area = _area(box)
    if area <= 0:
        x, y = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
        return fill[0] <= x <= fill[2] and fill[1] <= y <= fill[3]
    overlap = (max(fill[0], box[0]), max(fill[1], box[1]), min(fill[2], box[2]), min(fill[3], box[3]))
    return _area(overlap) >= COVER_SHARE * area


def _rectangles(drawing: dict) -> list[Box] | None:
    """The rectangles an opaque filled path paints; None for an opaque path of another shape (a
    polygon of lines, a curve: only rendering tells what it covers); [] for a path that is no cover."""
    if drawing.get("fill") is None or (drawing.get("fill_opacity") or 0) < COVER_OPACITY:
        return []
    boxes = []
    for item in drawing.get("items", ()):
        if item[0] == "re":
            boxes.append(tuple(pymupdf.Rect(item[1])))
        elif item[0] == "qu" and pymupdf.Quad(item[1]).is_rectangular:
            boxes.append(tuple(pymupdf.Quad(item[1]).rect))
        else:
            return None   # a curve or a line: its bounding box says nothing about what it covers
    return boxes


def _stroke_boxes(drawing: dict) -> list[Box]:
    """The rectangles an opaque stroked path paints over: each straight, axis-aligned segment as a
    band of the line's width (`1 1 1 RG 40 w ... S` paints a 40-point white bar). Curves and slanted
    segments are left out (their band is no rectangle)."""
    width = drawing.get("width") or 0.0
    if drawing.get("color") is None or (drawing.get("stroke_opacity") or 0) < COVER_OPACITY or width <= 0:
        return []
    segments: list[tuple[pymupdf.Point, pymupdf.Point]] = []
    for item in drawing.get("items", ()):
        if item[0] == "l":
            segments.append((pymupdf.Point(item[1]), pymupdf.Point(item[2])))
        elif item[0] in ("re", "qu"):
            quad = pymupdf.Rect(item[1]).quad if item[0] == "re" else pymupdf.Quad(item[1])
            corners = [quad.ul, quad.ur, quad.lr, quad.ll]
            segments += list(zip(corners, corners[1:] + corners[:1], strict=True))
    half = width / 2
    boxes = []
    for a, b in segments:
        if abs(a.y - b.y) < 0.01:
            boxes.append((min(a.x, b.x), a.y - half, max(a.x, b.x), a.y + half))
        elif abs(a.x - b.x) < 0.01:
            boxes.append((a.x - half, min(a.y, b.y), a.x + half, max(a.y, b.y)))
    return boxes


def _near_text(text_boxes: list[Box], height: float) -> Callable[[Box], bool]:
    """A test whether a box overlaps some text box, with the text boxes filed by bands of height BAND
    over a page `height` tall (a page of figures paints thousands of paths)."""
    last = int(height // BAND) + 1

    def band_of(y: float) -> int:
        return int(max(-1.0, min(float(last), y / BAND)))   # clamped first: a box may reach infinity

    def bands(box: Box) -> range:
        return range(band_of(box[1]), band_of(box[3]) + 1)

    filed: dict[int, list[Box]] = {}
    for box in text_boxes:
        for band in bands(box):
            filed.setdefault(band, []).append(box)

    def near(box: Box) -> bool:
        return any(_intersects(box, t) for band in bands(box) for t in filed.get(band, ()))
    return near


def _fills(page: pymupdf.Page, log: list, text_boxes: list[Box]) -> list[_Fill]:
    """Opaque filled rectangles and images that overlap some text, in paint order."""
    overlaps_text = _near_text(text_boxes, page.cropbox.height)
    near = [(i, kind, tuple(box)) for i, (kind, box, *_) in enumerate(log)
            if kind in ("fill-path", "stroke-path", "fill-image") and overlaps_text(tuple(box))]
    fills: list[_Fill] = []
    if any(kind in ("fill-path", "stroke-path") for _, kind, _ in near):
        markup = [tuple(a.rect) for a in page.annots(types=_TRANSPARENT_MARKUP)]
        drawings = {d.get("seqno"): d for d in page.get_drawings()}
        for i, kind, box in near:
            if kind == "fill-path" and i in drawings and not any(_covers(m, box) for m in markup):
                color = rgb(drawings[i]["fill"])
                rectangles = _rectangles(drawings[i])
                fills += ([_Fill(i, box, color, exact=False)] if rectangles is None
                          else [_Fill(i, rect, color) for rect in rectangles])
            elif kind == "stroke-path":   # a path filled and stroked logs its stroke one step after its fill
                drawing = drawings.get(i) if drawings.get(i, {}).get("type") == "s" else drawings.get(i - 1)
                if drawing is not None and "s" in drawing.get("type", ""):
                    color = rgb(drawing["color"])
                    fills += [_Fill(i, rect, color) for rect in _stroke_boxes(drawing)]
    if any(kind == "fill-image" for _, kind, _ in near):
        masked = [tuple(info["bbox"]) for info in page.get_image_info() if info.get("has-mask")]
        for i, kind, box in near:
            if kind == "fill-image":   # an image with alpha: what it covers, rendering tells
                fills.append(_Fill(i, box, None, exact=not any(_same_box(m, box) for m in masked)))
    return sorted(fills, key=lambda f: f.seqno)


def _ocr_image(log: list, area: Box) -> bool:
    """Some image covers at least OCR_IMAGE_SHARE of the page."""
    for kind, box, *_ in log:
        if kind == "fill-image":
            clipped = (max(box[0], area[0]), max(box[1], area[1]), min(box[2], area[2]), min(box[3], area[3]))
            if _area(clipped) >= OCR_IMAGE_SHARE * _area(area):
                return True
    return False


class _Grid:
    """Fills filed by the cells of a CELL-point grid over the page, in paint order: a fill that covers
    COVER_SHARE of a box holds the box's centre, so a character looks in one cell only (a page of
    figures paints thousands of paths)."""

    def __init__(self, fills: list[_Fill], area: Box) -> None:
        self.columns, self.rows = int(area[2] // CELL) + 1, int(area[3] // CELL) + 1
        self.cells: dict[tuple[int, int], list[_Fill]] = {}
        for fill in fills:
            x0, y0 = self._cell(fill.box[0], fill.box[1])
            x1, y1 = self._cell(fill.box[2], fill.box[3])
            for x in range(x0, x1 + 1):
                for y in range(y0, y1 + 1):
                    self.cells.setdefault((x, y), []).append(fill)

    def _cell(self, x: float, y: float) -> tuple[int, int]:
        # clamped first: a box may reach infinity
        return int(max(-1.0, min(float(self.columns), x / CELL))), int(max(-1.0, min(float(self.rows), y / CELL)))

    def at(self, box: Box) -> list[_Fill]:
        return self.cells.get(self._cell((box[0] + box[2]) / 2, (box[1] + box[3]) / 2), [])


@lru_cache(maxsize=4096)
def _faint(color: tuple[float, float, float], background: tuple[float, float, float], opacity: float) -> str | None:
    """`white_text` / `low_contrast` when `color` at `opacity` is too faint on `background`, else None."""
    seen = tuple(opacity * c + (1 - opacity) * b for c, b in zip(color, background, strict=True))
    if contrast(seen, background) >= MIN_CONTRAST:
        return None
    return "white_text" if is_white(color) and is_white(background) else "low_contrast"


def _char_reason(box: Box, seqno: int, color: tuple[float, float, float], opacity: float,
                 fills: list[_Fill]) -> str | None:
    """Why one visible character cannot be seen: covered later, or too faint on its background;
    ON_IMAGE when its background is an image or a shape only rendering can judge, a key of
    RENDERED_COVER when such a fill is painted over it later."""
    background: tuple[float, float, float] | None = WHITE
    for fill in fills:
        if fill.seqno != seqno and _covers(fill.box, box):
            if fill.seqno > seqno:
                shape = "shape" if fill.color is not None else "image"
                return f"covered_by_{shape}" if fill.exact else f"render:{shape}"
            background = fill.color if fill.exact else None
    return ON_IMAGE if background is None else _faint(color, background, opacity)


def _unseen_on_images(page: pymupdf.Page, boxes: dict[Key, tuple[Box, str]]) -> dict[Key, str]:
    """Of characters whose fate only rendering tells (over an image, under a polygon or an image with
    alpha), those the rendered page does not show, with the reason given beside each box: inside
    its box the rendered pixels are all of one colour to the eye (WCAG contrast below MIN_CONTRAST
    between the lightest and darkest pixel), as black text on a black photo renders. The page is
    rendered once, clipped to the boxes, at RENDER_ZOOM."""
    import numpy as np

    if not boxes:
        return {}
    area = pymupdf.Rect(0, 0, page.cropbox.width, page.cropbox.height)
    clip = pymupdf.Rect()
    for box, _ in boxes.values():
        clip |= pymupdf.Rect(box)
    clip &= area
    if clip.is_empty:
        return {}
    pix = page.get_pixmap(matrix=pymupdf.Matrix(RENDER_ZOOM, RENDER_ZOOM), clip=clip, colorspace=pymupdf.csRGB,
                          alpha=False)
    pixels = np.frombuffer(pix.samples, dtype=np.uint8).reshape(pix.height, pix.stride)[:, : pix.width * 3]
    channels = pixels.reshape(pix.height, pix.width, 3) / 255.0
    linear = np.where(channels <= 0.04045, channels / 12.92, ((channels + 0.055) / 1.055) ** 2.4)
    luminance = linear @ np.array([0.2126, 0.7152, 0.0722])
    unseen = {}
    for key, (box, reason) in boxes.items():
        x0, y0 = (int((box[0] - clip.x0) * RENDER_ZOOM), int((box[1] - clip.y0) * RENDER_ZOOM))
        x1, y1 = (int(np.ceil((box[2] - clip.x0) * RENDER_ZOOM)), int(np.ceil((box[3] - clip.y0) * RENDER_ZOOM)))
        inside = luminance[max(0, y0):max(0, y1), max(0, x0):max(0, x1)]
        if inside.size and (inside.max() + 0.05) / (inside.min() + 0.05) < MIN_CONTRAST:
            unseen[key] = reason
    return unseen


def page_ink(page: pymupdf.Page) -> PageInk:
    """The hidden characters and off-page spans of `page` (module docstring)."""
    trace = [span for span in page.get_texttrace() if span["chars"]]
    area = (0.0, 0.0, page.cropbox.width, page.cropbox.height)   # unrotated, as the trace is
    on_page = [s for s in trace if _intersects(tuple(s["bbox"]), area)]
    off_page = tuple(t for t in ("".join(chr(c[0]) for c in s["chars"]).strip() for s in trace
                                 if not _intersects(tuple(s["bbox"]), area)) if t)
    written = [s for s in on_page if any(chr(c[0]).strip() for c in s["chars"])]
    if not written:
        return PageInk({}, off_page, False)
    log = page.get_bboxlog()
    invisible = [s["type"] == 3 or s["opacity"] == 0 for s in written]
    ocr_layer = all(invisible) and _ocr_image(log, area)
    grid = _Grid(_fills(page, log, [tuple(s["bbox"]) for s in written]), area)
    reasons: dict[Key, str] = {}
    on_images: dict[Key, tuple[Box, str]] = {}   # characters only the rendered page judges, and their reason
    visible = []
    for span in on_page:
        if span["type"] == 3 or span["opacity"] == 0:
            reason = None if ocr_layer else "invisible"
        elif span["opacity"] < MIN_OPACITY:
            reason = "transparent"
        elif span["size"] < HIDDEN_FONT_PT:   # the trace's size: the width of an em as drawn
            reason = "tiny_font"
        else:
            reason = None
        if reason is None and ocr_layer:
            continue
        if reason is None:
            visible.append(span)
        color = rgb(span.get("color"))
        for char in span["chars"]:
            box = tuple(char[3])
            why = reason or _char_reason(box, span["seqno"], color, span["opacity"], grid.at(box))
            if why == ON_IMAGE or why in RENDERED_COVER:
                if chr(char[0]).strip():
                    on_images[char_key(chr(char[0]), char[2])] = (box, RENDERED_COVER.get(why, "low_contrast"))
            elif why:
                reasons[char_key(chr(char[0]), char[2])] = why
    reasons.update(_unseen_on_images(page, on_images))
    return PageInk(reasons, off_page, ocr_layer, tuple(visible))
