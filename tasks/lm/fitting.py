"""Every request fits its model: the rule that cuts prompts and continuations longer than the window.

A request to a local LM (a log-likelihood, a logit readout, a generation) gets at most `window`
tokens: the model's context (`max_position_embeddings`), and never more than `MAX_REQUEST_TOKENS`,
so the memory of one forward pass (activations, the attention mask) stays bounded whatever the
input: one 5 MB review costs what an 8,192-token one costs. The rule, fixed because scores depend
on it:

* a continuation (the scored text y) keeps at most half the window: a longer one keeps its first
  `window // 2` tokens and is scored without the end-of-turn token, i.e. as the probability
  that the answer *begins* with that text. The cut depends on y and the window only, so the
  conditional and the marginal request of one y score exactly the same tokens (GEM's difference
  stays a difference of like with like);
* a prompt that does not fit beside its continuation loses tokens from its middle: it keeps its
  first tokens (the chat template's head, the instructions, the start of the quoted text) and its
  last `PROMPT_TAIL` tokens (the end of the user text and the template's assistant header, where
  the answer begins).

A request that was cut says so (`LoglikelihoodResult.truncated`), and the score rows built on it
carry the reason `truncated: ...` beside a finite score (tasks/metrics/gem.py, fmi.py).
"""

from __future__ import annotations

from tasks.lm.loading import Tokens

MAX_REQUEST_TOKENS = 8192   # tokens of one request at most, whatever the model's context
PROMPT_TAIL = 16            # tokens kept from a cut prompt's end


def request_window(model_context: int | None, cap: int = MAX_REQUEST_TOKENS) -> int:
    """Tokens one request may use: the model's context, at most `cap` (the cap alone when unknown)."""
    return min(model_context, cap) if model_context and model_context > 0 else cap


def fit_prompt(prompt: Tokens, room: int) -> tuple[Tokens, bool]:
    """`prompt` within `room` tokens: its head and its last PROMPT_TAIL tokens; (tokens, whether cut)."""
    if len(prompt) <= room:
        return prompt, False
    tail = min(PROMPT_TAIL, room // 2)
    return prompt[: room - tail] + prompt[len(prompt) - tail:], True


def fit_request(prompt: Tokens, target: Tokens, eot: Tokens, window: int) -> tuple[Tokens, Tokens, bool]:
    """(prompt, scored tokens, whether cut) within `window` tokens; `target` ends with `eot`."""
    cut = False
    limit = window // 2
    if len(target) > limit:
        body = target[: len(target) - len(eot)] if eot and target[-len(eot):] == eot else target
        target, cut = body[:limit], True
    prompt, prompt_cut = fit_prompt(prompt, window - len(target))
    return prompt, target, cut or prompt_cut
