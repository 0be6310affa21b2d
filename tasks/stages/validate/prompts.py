"""Prompts of the LLM perturbation strategies, as (system, user) text ready for a `ChatRequest`.

Each builder takes the raw review (and, for surface_report, the paper's abstract) and returns the
system instruction and the user message. `PROMPT_VERSION` changes whenever any text here changes;
the LLM cache keys on the full prompt text anyway, so an edit never serves a stale answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from tasks.stages.validate.perturb import sentence_deletion

PROMPT_VERSION = "perturb-v3"   # v2: confident_tone and flattery added; v3: the rephrase of judgment lines
GAP_MARKER = "[SENTENCE REMOVED]"
ONLY_OUTPUT = "Reply with the resulting review text only: no preamble, no notes, no code fences."

_KEEP_SHAPE = (
    "Keep the review's layout: the same section headings in the same order, the same paragraphs and "
    "lists, and roughly the same length. Keep every topic the reviewer raises."
)


@dataclass(frozen=True)
class Prompt:
    system: str
    user: str
    max_tokens: int


def _words(text: str) -> int:
    return len(text.split())


def _rewrite_budget(review: str) -> int:
    """Room for a rewrite about as long as the review (English runs near 1.4 tokens a word)."""
    return min(4096, max(256, math.ceil(_words(review) * 2.0) + 64))


def deletion_completion(review: str) -> Prompt:
    system = (
        "You receive a peer review in which some sentences were cut out; each cut is marked "
        f"{GAP_MARKER}. Replace every marker with exactly one new sentence. Each new sentence must "
        "blend in with the surrounding text in tone and wording, yet carry no new information: "
        "no new claim, criticism, praise, detail or question about the paper, and nothing that "
        "contradicts the rest of the review. Copy every other character of the review unchanged. "
        f"No marker may remain. {ONLY_OUTPUT}"
    )
    return Prompt(system, sentence_deletion(review, gap=GAP_MARKER), _rewrite_budget(review))


def surface_report(abstract: str) -> Prompt:
    system = (
        "You are refereeing a submission to a leading machine learning conference, but all you can "
        "see is its abstract. Write a complete review anyway, as if you had read the paper, with "
        "these sections in this order, each heading on its own line followed by a colon: "
        "'Summary Of The Paper', 'Strength And Weaknesses', 'Clarity, Quality, Novelty And "
        "Reproducibility', 'Summary Of The Review'. In the strengths and weaknesses section give "
        "at least three reasons to accept and three reasons to reject, each argued in a sentence "
        "or two, then a few questions for the authors. Be specific and critical in the way an "
        f"experienced referee would be. {ONLY_OUTPUT}"
    )
    return Prompt(system, f"Abstract of the submission:\n\n{abstract.strip()}", 1024)


def ultra_concise(review: str) -> Prompt:
    target = max(15, round(_words(review) * 0.1))
    system = (
        f"Compress the peer review you receive to at most {target} words in total (about a tenth "
        "of its length). Keep only the overall gist of the reviewer's opinion; drop specific "
        "evidence, examples, numbers, caveats and secondary points. Do not add anything the "
        f"review does not say. {ONLY_OUTPUT}"
    )
    return Prompt(system, review, min(1024, target * 3 + 32))


def _stance_rewrite(instruction: str) -> Callable[[str], Prompt]:
    def build(review: str) -> Prompt:
        system = f"Rewrite the peer review you receive. {instruction} {_KEEP_SHAPE} {ONLY_OUTPUT}"
        return Prompt(system, review, _rewrite_budget(review))

    return build


opinion_flip = _stance_rewrite(
    "Turn the reviewer's overall verdict into its opposite: where the review favours the paper it "
    "must now oppose it and the other way round. Points presented as strengths become weaknesses and "
    "weaknesses become strengths, praise turns into criticism and criticism into praise, and the "
    "final recommendation is reversed. Keep the technical vocabulary and the subjects discussed."
)
rephrase = _stance_rewrite(
    "Say exactly the same things in different, more fluent and polished wording: fix grammar and "
    "awkward phrasing and make the prose read naturally. Do not add, drop, soften or strengthen any "
    "point; the meaning and the stance of every sentence must stay as they are."
)
opinion_shift_positive = _stance_rewrite(
    "Move the tone of every judgment towards a more favourable view of the paper: describe the "
    "strengths more warmly, present the weaknesses as minor and easily fixed, and make the "
    "recommendation a step more positive. Do not introduce new points."
)
opinion_shift_negative = _stance_rewrite(
    "Move the tone of every judgment towards a less favourable view of the paper: describe the "
    "strengths more coolly, present the weaknesses as serious, and make the recommendation a step "
    "more negative. Do not introduce new points."
)
opinion_shift_hedged = _stance_rewrite(
    "Make every judgment tentative and noncommittal: replace firm statements with cautious ones "
    "(for example 'the method works well' becomes 'the method might be of some use in certain "
    "cases'), so the review no longer takes a clear position, while still touching the same topics."
)
opinion_shift_extreme = _stance_rewrite(
    "Push every judgment to its most emphatic form: praise becomes enthusiastic acclaim (a sound "
    "idea becomes a landmark contribution) and criticism becomes severe condemnation, stated with "
    "complete certainty. Do not introduce new points."
)

# Manipulations: the judgments stay what they were, only the voice around them changes.
confident_tone = _stance_rewrite(
    "Remove every hedge and sign of doubt: words such as 'might', 'perhaps', 'it seems', 'somewhat', "
    "'I am not sure' and stated confidence levels go, and each point is asserted plainly and with "
    "conviction. Keep the direction of every judgment exactly: a criticism stays a criticism of "
    "the same strength of content, praise stays praise, and the recommendation does not change."
)
flattery = _stance_rewrite(
    "Add a few sentences of general compliments about the paper and its authors (for instance on "
    "their effort, ambition or the importance of the area) at the start and at the end. Change "
    "nothing else: every existing sentence, criticism and the recommendation stay as they are."
)

BUILDERS: dict[str, Callable[[str], Prompt]] = {
    "deletion_completion": deletion_completion,
    "ultra_concise": ultra_concise,
    "opinion_flip": opinion_flip,
    "rephrase": rephrase,
    "opinion_shift_positive": opinion_shift_positive,
    "opinion_shift_negative": opinion_shift_negative,
    "opinion_shift_hedged": opinion_shift_hedged,
    "opinion_shift_extreme": opinion_shift_extreme,
    "confident_tone": confident_tone,
    "flattery": flattery,
    "rephrase_second": rephrase,   # the same prompt, sent to the second rephraser ([validate] rephrase_llm)
}
NEEDS_ABSTRACT = frozenset({"surface_report"})


def rephrase_judgments(judgments: str) -> Prompt:
    """The rephrase of a review's judgment lines (GEM appendix D.2.1 rewrites the judgments, not the review)."""
    system = (
        "You receive a reviewer's judgments of a paper, one per line, each starting with 'The reviewer'. "
        "Reword every line so that it reads more fluently and naturally: fix grammar and awkward phrasing. "
        "Keep one judgment per line, in the same order, each still starting with 'The reviewer' and the same "
        "verb of stance (appreciates, criticizes, questions, suggests, ...). Do not add, merge, split, drop, "
        "soften or strengthen any judgment. Reply with the lines only: no preamble, no notes, no numbering."
    )
    return Prompt(system, judgments, _rewrite_budget(judgments))


JUDGMENT_BUILDERS: dict[str, Callable[[str], Prompt]] = {"rephrase": rephrase_judgments,
                                                         "rephrase_second": rephrase_judgments}


def build_prompt(strategy: str, review: str, abstract: str | None = None, *, target: str = "review") -> Prompt:
    """The prompt that perturbs `review` (or, for surface_report, writes one from `abstract`); with
    `target="judgments"`, `review` is the judgment lines of a strategy that rewrites them."""
    if target == "judgments":
        if strategy not in JUDGMENT_BUILDERS:
            raise ValueError(f"strategy {strategy!r} does not rewrite judgment lines")
        return JUDGMENT_BUILDERS[strategy](review)
    if strategy == "surface_report":
        if not abstract or not abstract.strip():
            raise ValueError("surface_report needs the paper's abstract")
        return surface_report(abstract)
    if strategy not in BUILDERS:
        known = ", ".join([*BUILDERS, "surface_report"])
        raise ValueError(f"no LLM prompt for strategy {strategy!r}; known: {known}")
    return BUILDERS[strategy](review)
