"""Constrained decoding that makes every line of an answer open with one of a few fixed prefixes.

Works on the token strings of the tokenizer's whole vocabulary, so merges are handled wherever
they fall: a token may finish one prefix and carry on into free text ("ates the" after
"The reviewer appreci"), and a newline may come alone, after a full stop (".\\n") or followed
by more characters ("\\nThe"); what follows a newline in a token must itself be a valid start of
a line. The state of each row is the text of its current line:

- *opening*: the line is still a proper prefix of some allowed prefix. Only tokens that keep it a
  prefix, or complete one and go on without a line break, are allowed; no end of answer.
- *content*: the line starts with a prefix. Anything without a line break goes; a line break or
  the end of the answer only once at least `min_content` non-blank tokens followed the prefix, and
  then only when the text after the break opens a new line correctly. With `one_sentence`, a line
  that has its content and ends a sentence (".", "!" or "?") must end there: the next token is a
  line break or the end of the answer, so a second sentence starts a new, prefixed line. A line
  is never finished as an exact copy of an earlier one: the token that would complete it is refused.
With `one_line`, the answer is its first line: no line break at all, and where a line could break the
answer ends instead.

Blank lines are not allowed, nor are line breaks other than "\\n". A prefix that should be followed
by a space carries it ("The reviewer appreciates "), which also keeps punctuation off the verb.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from transformers import LogitsProcessor, PreTrainedTokenizerBase

_BREAKS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"   # line breaks other than "\n": never generated


@functools.lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """The inverse of the byte-level BPE alphabet (GPT-2's printable stand-ins for raw bytes)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def token_strings(tokenizer: PreTrainedTokenizerBase) -> list[str]:
    """The text of every token id on its own (partial UTF-8 bytes become U+FFFD).

    Byte-level BPE vocabularies are mapped through the byte alphabet (fast); anything else, or a
    vocabulary where the mapping disagrees with `decode` on a sample, is decoded token by token."""
    size = len(tokenizer)
    pieces = tokenizer.convert_ids_to_tokens(list(range(size)))
    table = _byte_decoder()
    special = set(tokenizer.all_special_ids)

    def byte_level(i: int, piece: str | None) -> str | None:
        if piece is None or i in special or any(ch not in table for ch in piece):
            return None
        return bytes(table[ch] for ch in piece).decode("utf-8", errors="replace")

    mapped = [byte_level(i, piece) for i, piece in enumerate(pieces)]
    sample = [i for i in range(0, size, max(size // 300, 1)) if mapped[i] is not None]
    exact = all(mapped[i] == tokenizer.decode([i], clean_up_tokenization_spaces=False) for i in sample)
    if not exact:
        mapped = [None] * size
    return [text if text is not None else tokenizer.decode([i], clean_up_tokenization_spaces=False)
            for i, text in enumerate(mapped)]


@dataclass
class _Row:
    line: str           # text of the current line so far
    content: int = 0    # non-blank tokens after the prefix on this line
    done: bool = False  # the row ended (end-of-answer token seen)
    lines: set[str] = field(default_factory=set)   # lines already finished


class LinePrefixConstraint:
    """Token-level rules for one tokenizer and one set of prefixes; `processor` makes the per-call
    transformers LogitsProcessor."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, prefixes: Sequence[str], stop_ids: Sequence[int], min_content: int = 3,
                 one_sentence: bool = True, one_line: bool = False) -> None:
        import torch

        if not prefixes or any(not p or "\n" in p for p in prefixes):
            raise ValueError("line prefixes must be non-empty and on one line")
        self.prefixes = tuple(prefixes)
        self.min_content = min_content
        self.one_sentence = one_sentence
        self.one_line = one_line
        self.strings = token_strings(tokenizer)
        self.stop_ids = sorted(set(stop_ids))
        size = len(self.strings)
        special = set(tokenizer.all_special_ids) - set(self.stop_ids)
        stop_set = set(self.stop_ids)
        never, has_newline, tail_ok, breaks_now = ([False] * size for _ in range(4))
        for i, text in enumerate(self.strings):
            if i in special or i in stop_set or any(ch in _BREAKS for ch in text) or not text:
                never[i] = i not in stop_set
                continue
            if "\n" in text:
                has_newline[i] = True
                tail_ok[i] = self._tail_valid(text.split("\n")[1:])
                breaks_now[i] = tail_ok[i] and text.startswith("\n")
        self.never = torch.tensor(never, dtype=torch.bool)
        self.has_newline = torch.tensor(has_newline, dtype=torch.bool)
        self.tail_ok = torch.tensor(tail_ok, dtype=torch.bool)
        self.breaks_now = torch.tensor(breaks_now, dtype=torch.bool)   # valid tokens that open with the break
        self.stops = torch.zeros(size, dtype=torch.bool)
        self.stops[self.stop_ids] = True
        # the masks of the states that do not depend on the line's text, computed once
        self.any_token = ~self.never
        self.no_break = ~(self.never | self.has_newline | self.stops)
        self.must_break = self.breaks_now | self.stops
        self.content_ok = ~(self.never | (self.has_newline & ~self.tail_ok))
        if one_line:   # the first line is the whole answer: where it may break, it ends
            self.must_break = self.stops
            self.content_ok = ~(self.never | self.has_newline)
        self._opening: dict[str, torch.Tensor] = {}
        self._ids_of: dict[str, list[int]] = {}          # token text -> ids
        self._ids_breaking_after: dict[str, list[int]] = {}   # text before a token's line break -> ids
        for i, text in enumerate(self.strings):
            if not never[i]:
                self._ids_of.setdefault(text, []).append(i)
                if "\n" in text:
                    self._ids_breaking_after.setdefault(text.split("\n")[0], []).append(i)
        # token texts in sorted order, to find every token that starts with a given string
        self._sorted = sorted((text, i) for i, text in enumerate(self.strings) if text and not never[i])
        self._sorted_texts = [text for text, _ in self._sorted]

    # ---- string rules --------------------------------------------------------------------------
    def matched(self, line: str) -> str | None:
        """The prefix `line` starts with, if any."""
        return next((p for p in self.prefixes if line.startswith(p)), None)

    def opening(self, line: str) -> bool:
        """`line` is a proper beginning of some prefix (the empty line included)."""
        return self.matched(line) is None and any(p.startswith(line) for p in self.prefixes)

    def _content_of(self, line: str) -> int:
        prefix = self.matched(line)
        return int(prefix is not None and bool(line[len(prefix):].strip()))

    def _line_complete(self, line: str) -> bool:
        prefix = self.matched(line)
        return prefix is not None and len(line[len(prefix):].split()) >= self.min_content

    def _tail_valid(self, segments: list[str]) -> bool:
        """After the first line break of a token: whole lines in between, then a valid opening."""
        *middle, last = segments
        return all(self._line_complete(s) for s in middle) and (self.opening(last) or self.matched(last) is not None)

    def opening_mask(self, line: str) -> torch.Tensor:
        """Tokens allowed while `line` is still opening: those that stay inside a prefix, or
        complete one and continue on the same line."""
        import torch

        if line not in self._opening:
            mask = torch.zeros(len(self.strings), dtype=torch.bool)
            allowed = [i for i in self._opening_candidates(line) if self._opening_allows(line, self.strings[i])]
            mask[allowed] = True
            self._opening[line] = mask
        return self._opening[line]

    def _opening_allows(self, line: str, text: str) -> bool:
        """The rule of `opening_mask` for one token text (not a never or stop token)."""
        joined = line + text
        prefix = self.matched(joined)
        if prefix is not None:
            return "\n" not in joined[len(prefix):]
        return self.opening(joined)

    def _opening_candidates(self, line: str) -> set[int]:
        """Every token that may pass `_opening_allows` after the opening `line`: for a prefix p that
        `line` begins, the rest r = p[len(line):] either starts with the token or the token starts
        with r. Tokens outside this set fail the rule (so the mask is exact), and the set is small."""
        import bisect

        found: set[int] = set()
        for prefix in self.prefixes:
            if not prefix.startswith(line):
                continue
            rest = prefix[len(line):]
            for end in range(1, len(rest) + 1):
                found.update(i for i in self._ids_of.get(rest[:end], []) if not self.stops[i])
            at = bisect.bisect_left(self._sorted_texts, rest)
            while at < len(self._sorted) and self._sorted_texts[at].startswith(rest):
                found.add(self._sorted[at][1])
                at += 1
        return {i for i in found if not self.stops[i]}

    def allowed(self, row: _Row) -> torch.Tensor:
        """Boolean mask over the vocabulary of the tokens `row` may take next (a precomputed mask
        of the row's state, shared: callers must not change it in place)."""
        if row.done:
            return self.any_token
        if self.matched(row.line) is None:
            return self.opening_mask(row.line)
        if row.content < self.min_content:
            mask = self.no_break
        elif self.one_sentence and row.line.endswith((".", "!", "?")):
            return self.must_break
        else:
            mask = self.content_ok
        # a finished line is not written twice: its last token is refused
        repeats = [done[len(row.line):] for done in row.lines if done.startswith(row.line)]
        if repeats:
            mask = mask.clone()    # the precomputed masks are shared: never changed in place
            for rest in repeats:
                mask[self._ids_of.get(rest, []) + self._ids_breaking_after.get(rest, [])] = False
                if not rest:
                    mask[self.stop_ids] = False
        return mask

    def advance(self, row: _Row, token: int) -> None:
        if row.done or token in self.stop_ids:
            row.done = True
            return
        text = self.strings[token]
        if "\n" in text:
            *finished, row.line = (row.line + text).split("\n")
            row.lines.update(finished)
            row.content = self._content_of(row.line)
            return
        was_matched = self.matched(row.line) is not None
        row.line += text
        if was_matched:
            row.content += bool(text.strip())
        else:
            row.content = self._content_of(row.line)

    def can_start(self, answer_so_far: str) -> bool:
        """Whether an answer may begin with `answer_so_far` (a request's prefill)."""
        line = answer_so_far.split("\n")[-1]
        return self.matched(line) is not None or self.opening(line)

    def start(self, answer_so_far: str) -> _Row:
        """The state after a forced answer beginning (the request's prefill)."""
        line = answer_so_far.split("\n")[-1]
        if not self.can_start(answer_so_far):
            raise ValueError(f"the answer's forced beginning {answer_so_far!r} does not open an allowed line")
        return _Row(line, self._content_of(line))

    def processor(self, starts: Sequence[str], prompt_width: int) -> LogitsProcessor:
        """A LogitsProcessor for one generate() call over rows whose answers begin with `starts`."""
        from transformers import LogitsProcessor

        rows = [self.start(text) for text in starts]
        constraint = self

        class _Processor(LogitsProcessor):
            def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
                import torch

                if input_ids.shape[1] > prompt_width:
                    for row, token in zip(rows, input_ids[:, -1].tolist(), strict=True):
                        constraint.advance(row, token)
                mask = torch.stack([constraint.allowed(row) for row in rows])
                mask[~mask.any(dim=1)] = constraint.stops   # never a dead end: the answer may stop
                mask = mask.to(scores.device)
                return scores.masked_fill(~mask, float("-inf"))

        return _Processor()
