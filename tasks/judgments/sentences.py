"""Judgments one sentence at a time: the preprocessor for a small local LLM (GEM appendix C.1's rules).

GEM's preprocessor (appendix C.1) sends a whole review to GPT-4o, which writes one line per opinion,
each opening "The reviewer appreciates / criticizes / questions / suggests", without paper-specific
details. A 135M model given the same task stops after three or four lines whatever the review holds
(a fifth of GPT-4o's lines), and its free wording drifts off the sentence. So the `sentence` unit
splits the work where a small model can do it:

1. **Pieces.** The review's sentences (`tasks.core.review_text`, the splitter the validation
   strategies use, so a deleted sentence is a deleted piece), outside the section that only
   summarises the paper ("Summary Of The Paper" and its kin; a review with nothing outside such a section,
   a short one written as one "Summary" block, is read whole), each cut at "; " and at a clause that
   turns ("..., but ..."), so one line carries one opinion. Citations, bracketed asides, inline maths,
   list markers, discourse openers ("However,", "Overall,") and first-person frames ("I think that")
   are removed; a piece with fewer than `MIN_WORDS` words, a bare locator ("Page 4, second
   paragraph."), a citation ("Smith et al. ... arXiv 2021.") or an announcement of what follows ("I
   have a few questions.") is no judgment. GEM's preprocessor writes a line per *evaluation*, and a
   reviewer states one in the first sentence of a paragraph or list item, the sentences after it giving
   its reasons and examples, so by default (`[preprocess] sentences = "evaluations"`) a paragraph or list
   item gives the pieces of its first sentence that leaves any, and every question after it; "all" reads
   every sentence. On the tuning split of bench/validity/preprocess.py the later sentences' lines matched a
   GPT-4o line 0.41 of the time against the first sentences' 0.75 (docs/figures.md).
2. **The opening, chosen by the LLM.** Each piece, with its section's heading, is put to the LLM
   under the versioned prompt, and the opening is read from the model's log-likelihoods of the four
   openings and a fifth, "The reviewer describes" (a sentence with no opinion, left out): one
   log-likelihood readout, no generation. The readout is calibrated against the same prompt with an
   empty sentence (contextual calibration: a small model's preference for one opening whatever it
   reads is divided out). Where the review's structure says it outright the structure wins: a piece
   ending in "?" is a question, and a piece under a heading that names only strengths (only
   weaknesses) appreciates (criticizes) unless it asks or the readout says it only describes.
3. **The line**: the opening, then "that" and the piece, so the line keeps what the reviewer said.

The readouts are stored in the answer cache under the model's identity and the prompt, so a
perturbed review (a sentence deleted, a sentence from another review) asks only for its new pieces.
The words of a line are the reviewer's own, so unlike GPT-4o's lines they may name the paper's
methods; the `preprocessor` the output names says which unit made the lines.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from tasks.core.review_text import split_sections, split_sentences
from tasks.lm import LoglikelihoodRequest
from tasks.lm.types import LanguageModel

STANCES = ("appreciates", "criticizes", "questions", "suggests")
NO_JUDGMENT = "describes"
OPENINGS = (*STANCES, NO_JUDGMENT)
MIN_WORDS = 4                     # a piece with fewer words carries no judgment of its own
CALIBRATION = 0.75                # weight of the empty-sentence readout divided out (contextual calibration;
                                  # chosen on the tuning split of bench/validity/preprocess.py, never its test
                                  # sample: stance TV 0.35 / 0.33 / 0.21 / 0.14 / 0.29 at 0 / 0.25 / 0.5 / 0.75 / 1
                                  # on 40 tuning reviews, 0.13 at 0.75 on 40 others; docs/figures.md)

# the part of a review that only summarises the paper: GEM's preprocessor writes no judgment for it
_PAPER_SUMMARY = re.compile(r"^\W*(?:summary(?: of (?:the )?(?:paper|submission|contributions?))?|paper summary|"
                            r"synopsis|what is this paper about)\W*$", re.I)
_ONLY_STRENGTHS = re.compile(r"\b(?:strengths?|pros|positives?)\b", re.I)
_ONLY_WEAKNESSES = re.compile(r"\b(?:weakness(?:es)?|cons|negatives?|concerns?|limitations?)\b", re.I)
_CLAUSE = re.compile(r";\s+|,?\s+(?:but|however|although|though|whereas|while)\s+(?=\w)", re.I)
_ASIDES = re.compile(r"\([^()]*\)|\[[^\[\]]*\]|\$\$?[^$]*\$\$?|\\\w+\{[^}]*\}")
_LIST_MARK = re.compile(r"^\s*(?:[-*+\u2022>]+|\(?\d{1,3}[.)]|\(?[a-zA-Z][.)]|\([ivx]+\))\s*")
_OPENERS = re.compile(
    r"^(?:(?:however|overall|also|moreover|furthermore|additionally|in addition|besides|thus|therefore|hence|"
    r"plus|finally|first(?:ly)?|second(?:ly)?|third(?:ly)?|lastly|in summary|to summarize|in conclusion|"
    r"on the other hand|on the positive side|on the negative side|in general|in particular|in my opinion|"
    r"to me|for example|for instance|as mentioned(?: before| above)?|that said|nevertheless|nonetheless|"
    r"still|yet|and|but|so|minor|major|specifically|importantly|unfortunately|fortunately)\b[,:]?\s+)+", re.I)
_FRAMES = re.compile(r"^(?:i|we)\s+(?:think|believe|feel|find|found|see|guess|agree|understand|would say|am not sure)"
                     r"(?:\s+that)?\s+|^it seems(?: to me)?(?: that)?\s+|^my (?:understanding|impression|concern) is"
                     r"(?: that)?\s+", re.I)
# a bibliography entry or a bare citation ("Smith et al. Some title. arXiv 2021."): a pointer, not an opinion
_CITATION = re.compile(r"\bet al\.,?\s+(?-i:[A-Z])|(?-i:^[A-Z][\w'-]+,\s+[A-Z][\w'.-]*,)|\barxiv\b|\bproceedings\b|\bpreprint\b|\b(?:19|20)\d\d[a-z]?\)?\.?$", re.I)
# a sentence announcing what follows ("I have a few questions."): its judgments are the sentences after it
_ANNOUNCES = re.compile(r"^(?:i|we)\s+(?:have|had)\s+(?:\w+\s+){0,3}(?:questions?|concerns?|comments?|suggestions?|"
                        r"issues?|remarks?)\b", re.I)
_LOCATOR = re.compile(r"^(?:page|p\.|line|lines|section|sec\.|appendix|figure|fig\.|table|eq\.|equation)\b[\s\w.,:()-]*$",
                      re.I)


@dataclass(frozen=True)
class Piece:
    """One candidate judgment: the heading it stands under, its words, and how it ended."""

    section: str
    text: str
    asks: bool      # it ends in a question mark


def _clean(text: str) -> str:
    text = _LIST_MARK.sub("", text.strip())
    text = _ASIDES.sub("", text)
    text = re.sub(r"\s+", " ", text).strip(" ,;:-")
    previous = None
    while text != previous:
        previous = text
        text = _OPENERS.sub("", text)
        text = _FRAMES.sub("", text).strip(" ,;:-")
    return re.sub(r"\s+([,.;:?!])", r"\1", text)


def _is_paper_summary(section: str) -> bool:
    return bool(section) and bool(_PAPER_SUMMARY.match(section))


def pieces(review: str, every: bool = False) -> list[Piece]:
    """The candidate judgments of a review in order (see the module's step 1). A review whose every sentence
    stands under a summary heading (a short review written as one "Summary" block) is read whole.

    Unless `every`, only the evaluations: in each paragraph or list item, the first sentence that leaves a piece,
    and every question after it (module step 1)."""
    kept: list[Piece] = []
    summarised: list[Piece] = []
    for header, body in split_sections(review):
        section = re.sub(r"[#*_]+", "", header or "").strip().rstrip(":").strip()
        into = summarised if _is_paper_summary(section) else kept
        led = False                          # the paragraph or list item has its first sentence
        for sentence, gap in split_sentences(body):
            found = [Piece(section, text, text.endswith("?")) for text in map(_clean, _CLAUSE.split(sentence))
                     if not (len(re.findall(r"\w+", text)) < MIN_WORDS or _LOCATOR.match(text)
                             or _CITATION.search(text) or _ANNOUNCES.match(text))]
            into.extend(found if every or not led else [piece for piece in found if piece.asks])
            led = (led or bool(found)) and "\n" not in gap
    return kept or summarised


def prompt(piece: Piece | None, section: str) -> str:
    """The user turn asking for one piece's opening (`None`: the empty sentence of calibration)."""
    heading = section or "(none)"
    return f"Section: {heading}\nSentence: {piece.text if piece else ''}"


def structural_stance(piece: Piece) -> str | None:
    """The opening the review's structure states outright, if any (module step 2)."""
    if piece.asks:
        return "questions"
    strengths, weaknesses = _ONLY_STRENGTHS.search(piece.section), _ONLY_WEAKNESSES.search(piece.section)
    if strengths and not weaknesses:
        return "appreciates"
    if weaknesses and not strengths:
        return "criticizes"
    return None


def line(stance: str, piece: Piece) -> str:
    """The judgment line: the opening, "that", and the piece (its first letter lowered unless an acronym)."""
    text = piece.text
    if text[:1].isupper() and not text[1:2].isupper():
        text = text[0].lower() + text[1:]
    if text[-1] not in ".!?":
        text += "."
    return f"The reviewer {stance} that {text}"


def readouts(backend: LanguageModel, system: str, items: Sequence[Piece]) -> tuple[list[str], dict[str, int]]:
    """The opening of each piece (module step 2), and the prompts asked (`requests`, `input_tokens`: the
    prompts' tokens where the backend has a tokenizer, else their characters / 4, an estimate). Each
    prompt asks the log-likelihood of the five openings; the calibration prompts (one per section) beside."""
    sections = sorted({p.section for p in items})
    users = [prompt(p, p.section) for p in items] + [prompt(None, s) for s in sections]
    distinct = list(dict.fromkeys(users))
    requests = [LoglikelihoodRequest(system, u, f"The reviewer {o}") for u in distinct for o in OPENINGS]
    keep = getattr(backend, "kept_loglikelihood", None)
    results = keep(requests) if keep is not None else backend.loglikelihood(requests)
    scores: dict[str, list[float]] = {}
    for k, user in enumerate(distinct):
        chunk = results[k * len(OPENINGS):(k + 1) * len(OPENINGS)]
        # the openings share "The reviewer"; the end-of-turn token scored after each is not the opening's
        scores[user] = [math.fsum((r.token_logprobs or (r.logprob,))[:-1]) if r.token_logprobs else r.logprob
                        for r in chunk]
    chosen = []
    for piece in items:
        own, empty = scores[prompt(piece, piece.section)], scores[prompt(None, piece.section)]
        calibrated = [a - CALIBRATION * b for a, b in zip(own, empty, strict=True)]
        read = OPENINGS[max(range(len(OPENINGS)), key=calibrated.__getitem__)]
        stated = structural_stance(piece)
        chosen.append(read if read == NO_JUDGMENT or stated is None else stated)
    tokenizer = getattr(backend, "tokenizer", None) if distinct else None
    try:
        tokens = sum(len(ids) for ids in tokenizer([system + u for u in distinct])["input_ids"]) if tokenizer else None
    except TypeError:
        tokens = None
    if tokens is None:
        tokens = sum(len(system) + len(u) for u in distinct) // 4
    return chosen, {"requests": len(distinct), "input_tokens": tokens}
