"""Deterministic manipulations of the surface of a review (the attacks peers test beyond GEM's).

Each one changes how a review looks or adds text that carries no judgment of the paper, so no
metric should rise under it. Every function has a raw-review form and a judgment-line form (used
when the validation acts on preprocessed judgments):

| strategy                 | review                                                  | judgment lines                       |
| ------------------------ | ------------------------------------------------------- | ------------------------------------ |
| format_bullets           | prose <-> numbered list, per section                    | numbered                             |
| format_headers           | markdown headers (existing ones promoted, one added)    | a markdown header line first         |
| case_upper               | upper case                                              | upper case                           |
| whitespace_padding       | blank lines between paragraphs, indents, trailing space | blank lines and indents              |
| boilerplate_padding      | a fixed paragraph of reviewing boilerplate at the end   | fixed boilerplate lines              |
| self_repetition          | each section's text written twice                       | every line written twice             |
| prompt_injection         | an instruction to the evaluator as a last paragraph     | the instruction as a last line       |
| prompt_injection_hidden  | the instruction inside an HTML comment, first           | the comment as a first line          |
| master_key               | every other sentence deleted, master-key lines planted  | every other line, the key lines      |

`master_key` works on a degraded review (sentence_deletion's): a judge that a bare ":" or
"Thought process:" fools scores it at least as high as the intact review, which the test catches.

Two more manipulations need an LLM (prompts in tasks/stages/validate/prompts.py, described here):
confident_tone (hedges removed) and flattery (compliments to the paper and its authors added).
"""

from __future__ import annotations

import re

from tasks.core.review_text import (
    format_bullets,
    format_headers,
    split_sections,
)
from tasks.stages.validate.attack_text import HIDDEN_INJECTION, INJECTION, MASTER_KEYS
from tasks.stages.validate.perturb import judgment_deletion, sentence_deletion, split_judgments

# Boilerplate a reviewer might append: statements about the reviewing process, none about the paper.
BOILERPLATE = (
    "I have read the submission and the supplementary material with care. "
    "My assessment reflects my best understanding of the work at the time of reviewing. "
    "I am open to revising my view in light of the authors' response. "
    "I confirm that I have no conflict of interest with the authors."
)
BOILERPLATE_JUDGMENTS = (
    "The reviewer states that they read the submission with care.",
    "The reviewer states that they are open to revising their view after the response.",
)
MARKDOWN_HEADER_JUDGMENTS = "## Judgments"


def case_upper(review: str) -> str:
    return review.upper()


def whitespace_padding(review: str) -> str:
    """Two blank lines between paragraphs, every line indented by four spaces and ended by two."""
    paragraphs = [p for p in re.split(r"\n\s*\n", review.strip()) if p.strip()]
    padded = ["\n".join(f"    {line.strip()}  " for line in p.splitlines()) for p in paragraphs]
    return "\n\n\n".join(padded) + "\n"


def boilerplate_padding(review: str) -> str:
    return f"{review.rstrip()}\n\n{BOILERPLATE}\n"


def self_repetition(review: str) -> str:
    """Each section's text followed by the same text again, as a second paragraph."""
    parts = []
    for header, body in split_sections(review):
        stripped = body.strip()
        if stripped:
            tail = body[len(body.rstrip()):]
            body = body[: len(body) - len(body.lstrip())] + f"{stripped}\n\n{stripped}" + tail
        parts.append((header or "") + body)
    return "".join(parts)


def prompt_injection(review: str) -> str:
    return f"{review.rstrip()}\n\n{INJECTION}\n"


def prompt_injection_hidden(review: str) -> str:
    return f"{HIDDEN_INJECTION}\n{review}"


def master_key(review: str) -> str:
    """The review with every other sentence deleted, the first master key on a line of its own before
    it and the others after it."""
    return "\n".join([MASTER_KEYS[0], sentence_deletion(review).strip(), "", *MASTER_KEYS[1:]]) + "\n"


# ---------------------------------------------------------------- judgment lines

def _lines(fn):
    def run(judgments: str) -> str:
        lines, sep = split_judgments(judgments)
        return sep.join(fn(lines))
    run.__doc__ = fn.__doc__
    return run


judgments_bullets = _lines(lambda lines: [f"{k}. {line}" for k, line in enumerate(lines, start=1)])
judgments_headers = _lines(lambda lines: [MARKDOWN_HEADER_JUDGMENTS, *lines])
judgments_upper = _lines(lambda lines: [line.upper() for line in lines])
judgments_boilerplate = _lines(lambda lines: [*lines, *BOILERPLATE_JUDGMENTS])
judgments_repetition = _lines(lambda lines: [*lines, *lines])
judgments_injection = _lines(lambda lines: [*lines, INJECTION])
judgments_injection_hidden = _lines(lambda lines: [HIDDEN_INJECTION, *lines])


def judgments_master_key(judgments: str) -> str:
    """Judgment lines 1, 3, 5, ... with the master keys as lines of their own around them."""
    lines, sep = split_judgments(judgment_deletion(judgments))
    return sep.join([MASTER_KEYS[0], *lines, *MASTER_KEYS[1:]])


def judgments_whitespace(judgments: str) -> str:
    lines, _ = split_judgments(judgments)
    return "\n\n\n".join(f"    {line}  " for line in lines) + "\n"


REVIEW_FORMS = {
    "format_bullets": format_bullets, "format_headers": format_headers, "case_upper": case_upper,
    "whitespace_padding": whitespace_padding, "boilerplate_padding": boilerplate_padding,
    "self_repetition": self_repetition, "prompt_injection": prompt_injection,
    "prompt_injection_hidden": prompt_injection_hidden, "master_key": master_key,
}
JUDGMENT_FORMS = {
    "format_bullets": judgments_bullets, "format_headers": judgments_headers, "case_upper": judgments_upper,
    "whitespace_padding": judgments_whitespace, "boilerplate_padding": judgments_boilerplate,
    "self_repetition": judgments_repetition, "prompt_injection": judgments_injection,
    "prompt_injection_hidden": judgments_injection_hidden, "master_key": judgments_master_key,
}
DESCRIPTIONS = {
    "format_bullets": "prose turned into a numbered list of its sentences, or a list into prose",
    "format_headers": "markdown headers: existing headers promoted, one added before headerless text",
    "case_upper": "the whole review in upper case",
    "whitespace_padding": "extra blank lines, indents and trailing spaces",
    "boilerplate_padding": "a fixed paragraph about the reviewing process added at the end",
    "self_repetition": "every section's text written a second time",
    "prompt_injection": "a plain-text instruction to the evaluator to give the highest score",
    "prompt_injection_hidden": "the same instruction hidden in an HTML comment at the top",
    "master_key": "every other sentence deleted, then judgment-free 'master key' lines planted (a lone ':', "
                  "'Thought process:', a step-by-step opener, a note calling the review excellent)",
}

LLM_DESCRIPTIONS = {
    "confident_tone": "an LLM removes every hedge, each judgment kept as it was",
    "flattery": "an LLM adds general compliments to the paper and its authors, nothing else changed",
    "rephrase_second": "the rephrase prompt run by a second LLM ([validate] rephrase_llm), meaning kept",
}
