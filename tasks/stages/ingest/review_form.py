"""A venue's review form read from OpenReview, mapped onto the common rating scale.

Every venue publishes its official-review form in the invitation reviewers answer, so a yearly
refresh needs no hand-written venue table. Where the form lives:

- API v2: the venue group names the review invitation (`content.review_name`, e.g.
  "Official_Review") and often the rating and confidence fields (`review_rating`,
  `review_confidence`). `<venue>/-/<review_name>` is a super invitation whose
  `edit.invitation.edit.note.content` is the form; a per-paper child invitation carries it as
  `edit.note.content`. A field is `{"value": {"param": {"type": ..., "enum": [...]}}}`, the enum
  either `{"value": 6, "description": "6: ..."}` items or plain values.
- API v1: `<venue>/-/Official_Review` with `reply.content`, a field offering its options under
  `value-radio` / `value-dropdown` as strings ("6: marginally above the acceptance threshold").

The mapping rule (docs/openreview.md, "Review forms read from the venue"):

1. Options already on the common scale (ICLR 2023-2025: 1, 3, 5, 6, 8, 10) map to themselves.
2. Otherwise each option's label places it on the reject or the accept side of the acceptance
   threshold by the first side word the label says: "below" or "reject" -> reject side, "above" or
   "accept" -> accept side. The first word is the label's heading, so "marginally below the
   acceptance threshold" is a reject and NeurIPS' "Borderline accept: ... reasons to accept
   outweigh reasons to reject" an accept. An option without such a word takes the side of its
   labelled neighbours; the sides must not interleave.
3. The lower half of the common scale belongs to the reject side, the upper half to the accept
   side. A side's k options, in rank order, are cut into as many equal runs as its half has
   points: option p of k goes to point floor(p * points / k). NeurIPS 2025's 1-6 form gives
   1, 3, 5 | 6, 8, 10; ICLR 2026's 0-10 even form gives 1, 3, 5 | 6, 8, 10.

Confidence options must lie inside `[curate] confidence_range` and are kept as they are. A form
that cannot be mapped (no rating field, no options, no threshold in the labels, sides that
interleave) raises `FormError`: one line that names the field and its options. So does a derived
map that breaks numeric order (a higher option on a lower point) or that differs from the
venue's hand-written table where both exist: the labels of such venues' forms ship with the
code (`KNOWN_FORMS`), so the check never depends on what an earlier command cached; a cached
invitation is checked too.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tasks.core.config import ConfigError, VenueConfig
from tasks.core.errors import printable
from tasks.core.locks import write_bytes_atomic
from tasks.stages.ingest.forms import SCORE_ALIASES, parse_score, value

RATING_NAMES = ("rating", "recommendation", "overall_recommendation", "overall_assessment", "overall_rating",
                "overall_score", "score")
CONFIDENCE_NAMES = ("confidence", "reviewer_confidence")
FORM_FILE = "venue_form.json"
KNOWN_FORMS = Path(__file__).with_name("known_forms.toml")   # the labels of venues with a hand table
LABEL_CHARS = 400   # an option label is kept as one printable line of at most this many characters
# openreview-py reading a bad answer (RecursionError: JSON nested deeper than the parser follows)
MALFORMED = (KeyError, TypeError, ValueError, IndexError, AttributeError, RecursionError)
_SIDE_WORD = re.compile(r"\b(below|above|reject|accept)", re.I)
_SIDES = {"below": "reject", "reject": "reject", "above": "accept", "accept": "accept"}


class FormError(ConfigError):
    """A venue's review form that cannot be read or mapped: one line naming the field and its options."""


@dataclass(frozen=True)
class Option:
    value: float
    label: str


@dataclass
class ReviewForm:
    """A venue's review form as read (or as its venue table gives it) and its mapping."""

    venue_id: str
    source: str                                   # the invitation id, or "pipelines.toml"
    rating_field: str | None = None
    rating_options: list[Option] = field(default_factory=list)
    rating_map: dict[str, float] = field(default_factory=dict)
    confidence_field: str | None = None
    confidence_options: list[Option] = field(default_factory=list)
    rule: str = "table"                           # "identity" | "threshold" | "table"

    def venue_config(self, api_version: int) -> VenueConfig:
        """The venue table this form stands for (field names the built-in aliases miss are mapped)."""
        form = {name: column for name, column in ((self.rating_field, "rating"), (self.confidence_field, "confidence"))
                if name and SCORE_ALIASES.get(name) != column}
        return VenueConfig(api=f"v{api_version}", rating_map=self.rating_map, form=form)

    def describe(self) -> str:
        """One line: where the form came from and how each rating maps."""
        pairs = ", ".join(f"{k}->{v:g}" for k, v in self.rating_map.items())
        confidence = f"; confidence {self.confidence_field} {[_num(o.value) for o in self.confidence_options]}" \
            if self.confidence_field else ""
        return f"{self.source}: {self.rating_field or 'rating'} {pairs} ({self.rule}){confidence}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ReviewForm:
        options = {k: [Option(float(o["value"]), str(o["label"])) for o in raw.get(k) or []]
                   for k in ("rating_options", "confidence_options")}
        return cls(**{**raw, **options, "rating_map": {str(k): float(v) for k, v in raw["rating_map"].items()}})

    def row(self, api_version: int) -> dict[str, Any]:
        """The `venue_forms` row of this form."""
        return {"venue_id": self.venue_id, "api_version": api_version, "source": self.source, "rule": self.rule,
                "rating_field": self.rating_field, "confidence_field": self.confidence_field,
                "rating_options": json.dumps([[_num(o.value), o.label] for o in self.rating_options]),
                "rating_map": json.dumps({k: _num(v) for k, v in self.rating_map.items()}),
                "confidence_options": json.dumps([[_num(o.value), o.label] for o in self.confidence_options])}


def option_key(number: float) -> str:
    """The key of a raw rating in a rating map ("6", "0.5", "1000000")."""
    return f"{_num(number)}"


def _num(number: float) -> int | float:
    return int(number) if float(number).is_integer() else number


# -- reading the invitation -----------------------------------------------------------------------
def review_invitation_id(venue_id: str, group_content: dict[str, Any] | None) -> str:
    """`<venue>/-/<review_name>` (the group's `review_name`, else Official_Review)."""
    return f"{venue_id}/-/{value(group_content, 'review_name') or 'Official_Review'}"


def form_fields(invitation: dict[str, Any]) -> dict[str, Any]:
    """The form's field specs of an invitation JSON in any of its shapes (module docstring)."""
    edit = invitation.get("edit") or {}
    for path in (("invitation", "edit", "note", "content"), ("note", "content")):
        node: Any = edit
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and node:
            return node
    content = (invitation.get("reply") or {}).get("content")
    return content if isinstance(content, dict) else {}


def field_options(spec: Any) -> list[Option]:
    """The options a form field offers (v1 value-radio / value-dropdown, v2 param.enum), value order."""
    if not isinstance(spec, dict):
        return []
    raw: Any = None
    for key in ("value-radio", "value-dropdown", "values-radio", "values-dropdown", "values-checkbox"):
        if isinstance(spec.get(key), list):
            raw = spec[key]
    param = (spec.get("value") or {}).get("param") if isinstance(spec.get("value"), dict) else None
    if raw is None and isinstance(param, dict):
        raw = param.get("enum") or param.get("items")
    options = []
    for item in raw or []:
        if isinstance(item, dict):
            number, label = parse_score(item.get("value")), str(item.get("description") or item.get("value"))
        else:
            number, label = parse_score(item), str(item)
        if number is not None and math.isfinite(number):
            options.append(Option(number, printable(label, LABEL_CHARS)))
    return sorted(set(options), key=lambda o: o.value)


def _pick(fields: dict[str, Any], named: str | None, names: Sequence[str]) -> str | None:
    if named and named in fields:
        return named
    return next((n for n in names if field_options(fields.get(n))), None)


def derive_form(venue_id: str, invitation: dict[str, Any], group_content: dict[str, Any] | None,
                common_scale: Sequence[float], confidence_range: Sequence[float]) -> ReviewForm:
    """The `ReviewForm` of an official-review invitation JSON; raises FormError (module docstring)."""
    source = printable(invitation.get("id") or review_invitation_id(venue_id, group_content), 300)
    fields = form_fields(invitation)
    if not fields:
        raise FormError(f"{venue_id}: the review invitation {source} shows no form fields: add a "
                        f'[venues."{venue_id}"] table to pipelines.toml')
    rating = _pick(fields, value(group_content, "review_rating"), RATING_NAMES)
    if rating is None:
        raise FormError(f"{venue_id}: no rating field with options in {source} "
                        f"(fields: {printable(', '.join(sorted(map(str, fields))), 500)}): "
                        f'add a [venues."{venue_id}"] table with a form and rating_map')
    options = field_options(fields[rating])
    if not options:
        raise FormError(f"{venue_id}: {source} field {rating!r} offers no numbered options")
    rating_map, rule = map_ratings(venue_id, rating, options, common_scale)
    confidence = _pick(fields, value(group_content, "review_confidence"), CONFIDENCE_NAMES)
    confidences = field_options(fields.get(confidence)) if confidence else []
    low, high = confidence_range
    outside = [o.label for o in confidences if not low <= o.value <= high]
    if outside:
        raise FormError(f"{venue_id}: {source} field {confidence!r} has options outside [curate] confidence_range "
                        f"{_num(low)}-{_num(high)}: {'; '.join(outside)}")
    return ReviewForm(venue_id, source, rating, options, rating_map, confidence, confidences, rule)


def _side(label: str) -> str | None:
    """The side of the first side word of `label` (module docstring, rule 2)."""
    found = _SIDE_WORD.search(label)
    return _SIDES[found.group(1).lower()] if found else None


def check_map(venue_id: str, field_name: str, rating_map: dict[str, float],
              known: dict[str, float] | None = None) -> None:
    """FormError unless `rating_map` keeps numeric order and equals `known` (a hand table) when given."""
    ordered = sorted(rating_map.items(), key=lambda kv: float(kv[0]))
    for (low, low_point), (high, high_point) in zip(ordered, ordered[1:], strict=False):
        if high_point < low_point:
            raise FormError(f"{venue_id}: the map derived from field {field_name!r} breaks numeric order "
                            f"({low}->{low_point:g} but {high}->{high_point:g}): add a [venues.\"{venue_id}\"] rating_map")
    if known is not None and {k: float(v) for k, v in known.items()} != rating_map:
        def shown(point: Any) -> str:
            return "none" if point is None else f"{float(point):g}"

        differ = ", ".join(f"{k}: {shown(rating_map.get(k))} vs {shown(known.get(k))}"
                           for k in sorted(set(rating_map) | set(known), key=float)
                           if rating_map.get(k) != (float(known[k]) if k in known else None))
        raise FormError(f"{venue_id}: the map derived from field {field_name!r} differs from the venue table "
                        f"in pipelines.toml (derived vs table: {differ}): check the table against the form")


def map_ratings(venue_id: str, field_name: str, options: list[Option], common_scale: Sequence[float]
                ) -> tuple[dict[str, float], str]:
    """(raw rating -> common-scale point, rule) for a form's rating options (module docstring)."""
    scale = sorted(float(s) for s in common_scale)
    key = {o.value: option_key(o.value) for o in options}
    if all(o.value in scale for o in options):
        return {key[o.value]: o.value for o in options}, "identity"
    sides = [_side(o.label) for o in options]
    rejects = [o.value for o, s in zip(options, sides, strict=True) if s == "reject"]
    accepts = [o.value for o, s in zip(options, sides, strict=True) if s == "accept"]
    if not rejects or not accepts or max(rejects) >= min(accepts):
        raise FormError(f"{venue_id}: cannot place the acceptance threshold in field {field_name!r} (options: "
                        f"{'; '.join(o.label for o in options[:20])}{'; ...' if len(options) > 20 else ''}): "
                        f'add a [venues."{venue_id}"] rating_map')
    last_reject, first_accept = max(rejects), min(accepts)   # once: per option it made the rule quadratic
    lower = [o for o in options if o.value <= last_reject]
    upper = [o for o in options if o.value >= first_accept]
    if len(lower) + len(upper) != len(options):
        between = [o.label for o in options if last_reject < o.value < first_accept]
        raise FormError(f"{venue_id}: field {field_name!r} has options between its reject and accept labels "
                        f"({'; '.join(between)}): add a [venues.\"{venue_id}\"] rating_map")
    half = len(scale) // 2
    mapping = {}
    for side, points in ((lower, scale[:half]), (upper, scale[half:])):
        for rank, option in enumerate(side):
            mapping[key[option.value]] = points[rank * len(points) // len(side)]
    check_map(venue_id, field_name, mapping)
    return mapping, "threshold"


def read_form(client: Any, api_version: int, venue_id: str, group_content: dict[str, Any] | None, folder: Path,
              common_scale: Sequence[float], confidence_range: Sequence[float]) -> ReviewForm:
    """The venue's form through the real client (the invitation cached under `folder`)."""
    invitation = fetch_invitation(client, venue_id, group_content, folder)
    return derive_form(venue_id, invitation, group_content, common_scale, confidence_range)


def fetch_invitation(client: Any, venue_id: str, group_content: dict[str, Any] | None, folder: Path
                     ) -> dict[str, Any]:
    """The venue's review invitation JSON, from the raw cache under `folder` or through the real
    client (then cached); FormError when it cannot be read. An answer nested deeper than any parser
    follows (a hostile server) is malformed like one without an `id`."""
    import openreview

    from tasks.stages.ingest.raw_cache import read_cached

    path = folder / "review_invitation.json"
    invitation = read_cached(path, folder, lambda c: None if isinstance(c, dict) else "not a JSON object")
    if invitation is not None:
        return invitation
    ident = review_invitation_id(venue_id, group_content)
    try:
        found = client.get_invitation(ident)
    except MALFORMED as error:   # the library cannot read what the server sent (no `id`, no list)
        raise FormError(f"{venue_id}: the review invitation {ident} came back malformed ({_what(error)}): "
                        f'add a [venues."{venue_id}"] table to pipelines.toml') from None
    except openreview.OpenReviewException as error:
        invitation = _first_child(client, ident)
        if invitation is None:
            raise FormError(f"{venue_id}: the review invitation {ident} cannot be read ({_name(error)}): add a "
                            f'[venues."{venue_id}"] table to pipelines.toml') from None
    else:
        invitation = found.to_json()
    folder.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, json.dumps(invitation).encode())
    return invitation


def _first_child(client: Any, ident: str) -> dict[str, Any] | None:
    """A per-paper review invitation of `ident` (readable when the super invitation is not)."""
    import openreview

    try:
        children = client.get_invitations(invitation=ident, limit=1)
    except (openreview.OpenReviewException, *MALFORMED):
        return None
    return children[0].to_json() if children else None


def _what(error: Exception) -> str:
    return f"{type(error).__name__}: {error}" if isinstance(error, KeyError) else type(error).__name__


def _name(error: Any) -> str:
    body = error.args[0] if getattr(error, "args", None) else None
    return str(body.get("name") or body.get("status")) if isinstance(body, dict) else type(error).__name__


def table_form(venue_id: str, venue: VenueConfig) -> ReviewForm:
    """The form a `[venues."<id>"]` table states (it overrides the venue's own)."""
    rating_map = {k: float(v) for k, v in (venue.rating_map or {}).items()}
    rating = next((k for k, c in venue.form.items() if c == "rating"), None)
    confidence = next((k for k, c in venue.form.items() if c == "confidence"), None)
    return ReviewForm(venue_id, "pipelines.toml", rating, [], rating_map, confidence, [], "table")


def known_labels(venue_id: str) -> list[str] | None:
    """The rating labels of `venue_id`'s form as shipped in KNOWN_FORMS, or None."""
    import tomllib

    forms = tomllib.loads(KNOWN_FORMS.read_text(encoding="utf-8")).get("forms", {})
    labels = (forms.get(venue_id) or {}).get("labels")
    return [str(label) for label in labels] if isinstance(labels, list) else None


def checked_table_form(venue_id: str, venue: VenueConfig, folder: Path, common_scale: Sequence[float],
                       confidence_range: Sequence[float]) -> ReviewForm:
    """`table_form`, after checking the table's rating_map against the map the label rule derives
    from the venue's own labels: those shipped in KNOWN_FORMS (always, no request, whatever the raw
    cache holds), and the venue's cached invitation when the raw cache holds one. FormError when
    they differ; a form the rule cannot read keeps the table (that is why the venue has one)."""
    form = table_form(venue_id, venue)
    if not venue.rating_map:
        return form
    labels = known_labels(venue_id)
    if labels is not None:
        options = sorted({Option(float(label.split(":")[0]), label) for label in labels}, key=lambda o: o.value)
        derived_map, rule = map_ratings(venue_id, "rating", options, common_scale)
        if rule == "threshold":
            check_map(venue_id, "rating", derived_map, venue.rating_map)
    try:
        invitation = json.loads((folder / "review_invitation.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return form
    if not isinstance(invitation, dict):
        return form
    try:
        derived = derive_form(venue_id, invitation, None, common_scale, confidence_range)
    except FormError:
        return form
    if derived.rule == "threshold":
        check_map(venue_id, derived.rating_field or "rating", derived.rating_map, venue.rating_map)
    return form


def save_form(form: ReviewForm, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(out_dir / FORM_FILE, json.dumps(form.to_json(), indent=1).encode())


def saved_form(out_dir: Path) -> ReviewForm | None:
    """The form ingest saved in `out_dir`, or None."""
    try:
        return ReviewForm.from_json(json.loads((out_dir / FORM_FILE).read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def with_venue_forms(cfg: Any, pipeline: str) -> Any:
    """`cfg` with the form ingest read for each venue of `pipeline` that has no venue table, so
    the stages after ingest map its ratings as ingest did."""
    from tasks.core.layout import stage_dir

    derived = {}
    for venue_id in cfg.pipelines[pipeline].venues:
        if venue_id in cfg.venues:
            continue
        form = saved_form(stage_dir(cfg, pipeline, "ingest", venue_id))
        if form is not None:
            derived[venue_id] = form.venue_config(cfg.venue(venue_id).api_version(venue_id))
    return cfg.model_copy(update={"venues": {**cfg.venues, **derived}}) if derived else cfg
