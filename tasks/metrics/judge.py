"""LLM-as-a-judge baselines: an LLM rates the candidate review 0-10.

What each judge reads (the registry descriptions say the same):

* `llm_judge`: the paper's synopsis (the abstract, with the authors' stated strengths and
  weaknesses when preprocessing made them), the human reference reviews of the paper (the
  candidate itself left out) and the candidate's raw review; it answers with the score alone.
* `llm_judge_noref`: the same without the reference reviews (reference-free).
* `lm_examiner`: GEM's LM-examiner baseline (GEM appendix D.3), reference-free: the paper's text
  from its PDF, cut to the judge's context at a section boundary (`[score] judge_context_tokens`),
  and the candidate's judgment lines (GEM gives the examiner the review's judgments); it writes an
  analysis of four criteria (understanding, coverage, substantiation, constructiveness) and an
  overall judgement first, then the score. A paper without PDF text gets NaN (`no_paper_text`).

How the rating is read (tasks/metrics/rating.py): from a judge whose backend gives token
probabilities (a local model; any backend whose `loglikelihood` answers), as the expectation over
the scale 0-10 at the answer position after "Score:" (G-Eval): a number for every candidate, and
no generation for llm_judge / llm_judge_noref. From the others, the answer is generated and the
number after "Score:" parsed; an answer without one is NaN with the reason `judge_unanswered`.
`[score] judge_method = "generate"` asks every judge for the generated answer. The score rows'
`eval_lm` names the method and the model of each judge ("readout:local/smollm2",
"generate:anthropic/claude-haiku-4-5"; a panel's members joined by "+"), which the leaderboard's
predictor column shows.

The judge is `Resources.llm` (the `[score.oracle]` backend), or the panel `[score] judges`, whose
ratings are averaged (tasks/metrics/panel.py); a panel's members also get rows of their own, each
named by its member in `eval_lm` (`member_rows`), so the board has every judge's column beside the panel's. `llm_judge` writes its rating on each of the
candidate's one row with a null reference, since it read every reference of the paper at once; the
reference-free judges do the same (the registry's `reads_references` tells the two apart).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence

import polars as pl

from tasks.core.frames import reference_sets, usable
from tasks.core.prompts import load_prompt
from tasks.metrics.panel import member_rows
from tasks.metrics.registry import LLM_JUDGE, FamilyResult, Metric, Resources, register_family, scores_frame

PROMPT_VERSIONS = {"llm_judge": "judge-reference-v1", "llm_judge_noref": "judge-free-v1",
                   "lm_examiner": "judge-examiner-v1"}
REFERENCE_FREE = ("llm_judge_noref", "lm_examiner")
MAX_ANSWER_TOKENS = 8   # "Score:" is prefilled: " 7", " 7.5" or " 7.5/10" and the end fit; more only pays for text
EXAMINER_TOKENS = 768   # the examiner's analysis and score
CHARS_PER_TOKEN = 3.5   # the paper's share of the examiner's context, estimated on the safe side
SAFETY_TOKENS = 64

# The judge's answer starts here (the prompts ask for "Score: N"): a model of any size then answers
# with its number; a prefill is continued by the local and Anthropic backends and by OpenAI-compatible
# servers with continue_final_message (elsewhere it is asked for in the prompt).
def synopsis_text(row: dict | None) -> str:
    if row is None or usable(row.get("abstract")) is None:
        return "Not available."
    text = f"Abstract:\n{row['abstract'].strip()}"
    if usable(row.get("assw")):
        text += f"\n\nStrengths and weaknesses the authors claim for their own work:\n{row['assw'].strip()}"
    return text


def judge_user(synopsis: str, candidate: str, references: Sequence[str] | None) -> str:
    """The judge's user turn; `references=None` for the reference-free judge."""
    parts = [f"### Synopsis of the paper\n{synopsis}"]
    if references is not None:
        parts += [f"### Human review {i}\n{text.strip()}" for i, text in enumerate(references, 1)]
    parts.append(f"### Candidate review\n<candidate>\n{candidate.strip()}\n</candidate>")
    return "\n\n".join(parts) + "\n\nRate the candidate review (Score: 0-10)."


def examiner_user(paper: str, review: str) -> str:
    """The examiner's user turn: the paper's text and the review under examination."""
    return f"<paper>\n{paper.strip()}\n</paper>\n\n<review>\n{review.strip()}\n</review>"


def examiner_paper(text: str, system: str, review: str, context_tokens: int) -> str | None:
    """The paper's text cut at a section boundary (tasks/core/paper_fit.py) so that the examiner's prompt and
    its answer fit `context_tokens` (estimated at CHARS_PER_TOKEN); None when not even a word fits."""
    from tasks.core.paper_fit import estimate_counter, fit_text

    count = estimate_counter(CHARS_PER_TOKEN)
    budget = context_tokens - EXAMINER_TOKENS - SAFETY_TOKENS - count(system) - count(examiner_user("", review))
    fit = fit_text(text, budget, count)
    return fit.text if fit is not None else None


def _plan(metric: Metric, cand: dict, refs: list[dict], synopsis: dict | None, system: str,
          context_tokens: int) -> tuple[str | None, str | None]:
    """(user turn, reason): the question a candidate puts to the judge, or why there is none."""
    if metric.name == "lm_examiner":
        review = usable(cand["judgments"])
        if review is None:
            return None, "no_candidate_judgments"
        paper = usable((synopsis or {}).get("paper_text"))
        if paper is None:
            return None, "no_paper_text"
        cut = examiner_paper(paper, system, review, context_tokens)
        return (examiner_user(cut, review), None) if cut else (None, "paper_does_not_fit")
    x = usable(cand["review_text"])
    if x is None:
        return None, "no_candidate_text"
    texts = [t for t in (usable(r["review_text"]) for r in refs) if t]
    if metric.name not in REFERENCE_FREE and not texts:
        return None, "no_reference"
    return judge_user(synopsis_text(synopsis), x, None if metric.name in REFERENCE_FREE else texts), None


def judge_family(metrics: Sequence[Metric], candidates: pl.DataFrame, references: pl.DataFrame,
                 negatives: pl.DataFrame | None, synopses: pl.DataFrame, resources: Resources) -> FamilyResult:
    """SCORES rows of the judges given: one batch of questions per judge."""
    from tasks.metrics.rating import rate_panel

    synopsis_rows = {r["paper_id"]: r for r in synopses.iter_rows(named=True)}
    rows: list[dict] = []
    for metric in metrics:
        version = PROMPT_VERSIONS[metric.name]
        system = load_prompt(version)
        asks: dict[str, str] = {}                    # question key -> user turn
        plans: list[tuple[dict, str | None]] = []
        for cand, refs in reference_sets(candidates, references):
            base = {"paper_id": cand["paper_id"], "candidate": cand["candidate"], "source": cand["source"],
                    "metric": metric.name, "score": math.nan}
            user, reason = _plan(metric, cand, refs, synopsis_rows.get(cand["paper_id"]), system,
                                 resources.judge_context_tokens)
            key = None
            if user is not None:
                key = hashlib.sha256(json.dumps([version, system, user]).encode()).hexdigest()[:32]
                asks.setdefault(key, user)
            # one row, reference null: the rating reads all of the paper's references at once (or none), so no
            # row of it may pass for a score against one reference (the board without flagged references drops
            # the whole rating where any reference it read is flagged)
            plans.append(({**base, "reference": None, "reason": reason}, key))
        analysis = metric.name == "lm_examiner"
        rated = rate_panel(resources, {k: (system, u) for k, u in asks.items()}, f"judge:{metric.name}",
                           EXAMINER_TOKENS if analysis else MAX_ANSWER_TOKENS, analysis)
        for row, key in plans:
            row["eval_lm"] = rated.name
            if key is not None:
                row["score"] = rated.values[key]
                row["reason"] = "judge_unanswered" if math.isnan(rated.values[key]) else None
            rows.append(row)
        # a panel's members, each on its own beside the panel (the board's columns of each judge)
        rows += member_rows([r for r, _ in plans], [k for _, k in plans], rated.members, "judge_unanswered")
    return FamilyResult(scores_frame(rows))


_HOW = ("the rating is the expectation over 0-10 at the answer position where the judge's backend gives token "
        "probabilities, else the parsed 'Score: N'")
register_family(
    judge_family, LLM_JUDGE,
    ("llm_judge", "raw", "abstract",
     "LLM-as-a-judge with references: reads the synopsis (abstract, and ASSW when made), the paper's human "
     f"reviews (the candidate left out) and the candidate's raw review, answers a 0-10 score alone; {_HOW}"),
)
register_family(
    judge_family, LLM_JUDGE,
    ("llm_judge_noref", "raw", "abstract",
     "LLM-as-a-judge without references: reads the synopsis and the candidate's raw review, answers a 0-10 "
     f"score alone; {_HOW}"),
    ("lm_examiner", "judgments", "paper",
     "GEM's LM-examiner (appendix D.3), reference-free: reads the paper's PDF text cut to the judge's "
     "context at section boundaries and the candidate's judgment lines, analyses understanding, coverage, "
     f"substantiation and constructiveness, then scores 0-10; {_HOW} after the analysis"),
    reads_references=False,
)
