"""LLM-oracle cells at statement level: the Scoring Rules paper's best metric, `tv_fvar_statement`.

F = TV, E = f-variational, R = statement, Pi = LLM oracle (seed 002, appendix C). The reference y
is decomposed into statements w_1..w_K (here: its preprocessed judgment lines); the candidate x
stays whole. For each (x, w) an oracle is asked whether x supports w; its answer gives a bounded
local critic t(x, w) in [-1/2, 1/2], the report-level critic is the mean over the statements,

    T(x, y) = 1/K sum_k t(x, w_k),     score = T(x, y) - mean over negatives y- of T(x, y-),

so the score lies in [-1, 1] and estimates a lower bound on I_TV(X; Y).

The oracle here is the *logit readout* of the evaluation LM (tasks/lm/readout.py, the `readout`
resource): q = P(Yes) / (P(Yes) + P(No)) from the next-token distribution at the answer position,
and t = q - 1/2, a soft version of the paper's binary +-1/2 that keeps the same bound.
Deterministic and without generation; every distinct (candidate, statement) question is asked once
per call, whichever references and negatives share it. The metric is registered with the other
oracle cells in tasks/metrics/oracle_cells.py, where `[score] oracle_predictor = "generate"` puts a
generation backend in the readout's place (a binary answer, t = +-1/2 as in the paper).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence

from tasks.lm.readout import MIN_SCALE_MASS

ORACLE_VERSION = "statement-support-v1"
ANSWERS = ("Yes", "No")

_SYSTEM = (
    "You compare peer reviews of the same scientific paper. You are given the assessment of one "
    "referee and a single statement taken from another referee's assessment. Say whether the "
    "assessment makes, supports or agrees with the point of the statement. Reply with one word: Yes or No."
)
_USER = "### Assessment\n{candidate}\n\n### Statement\n{statement}\n\nDoes the assessment support the statement?"


def question(candidate: str, statement: str) -> tuple[str, str]:
    """(system, user) of one yes/no question to the oracle."""
    return _SYSTEM, _USER.format(candidate=candidate.strip(), statement=statement.strip())


def question_key(eval_lm: str, system: str, user: str) -> str:
    blob = json.dumps([ORACLE_VERSION, eval_lm, system, user, ANSWERS], ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def statements(text: str | None) -> list[str]:
    """The statements of a reference: its non-blank judgment lines."""
    return [line.strip() for line in (text or "").splitlines() if line.strip()]


# The least probability the readout must put on "Yes" and "No" together for their ratio to be an answer: below
# it the model was answering something else, and renormalising the crumbs would make a verdict out of noise
# (the rating readouts' floor, tasks/lm/readout.py MIN_SCALE_MASS). Such a question is NaN, and the cell's
# row says `oracle_unanswered`.
MIN_ANSWER_MASS = MIN_SCALE_MASS


def local_critic(p_yes: float, p_no: float, min_mass: float = MIN_ANSWER_MASS) -> float:
    """t = P(Yes) / (P(Yes) + P(No)) - 1/2, in [-1/2, 1/2]; NaN when the readout put less than `min_mass` on
    the two answers together."""
    total = p_yes + p_no
    return p_yes / total - 0.5 if total > 0 and total >= min_mass else math.nan


def report_critic(local: Sequence[float]) -> float:
    """T(x, y): the mean of the local critics over y's statements."""
    return math.fsum(local) / len(local)


def tv_fvar_statement_score(positive: Sequence[float], negatives: Sequence[Sequence[float]]) -> float:
    """T(x, y) - mean_k T(x, y-_k) from the local critics of y's and of each negative's statements."""
    return report_critic(positive) - math.fsum(report_critic(n) for n in negatives) / len(negatives)
