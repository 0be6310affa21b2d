"""The leaderboard's `qualified` flag and `note` (tasks/stages/validate/board_notes.py): a column produced by a
model that failed the exam is marked, the pairs an estimator lost are counted, and gem_s_assw scores
conditioned on an ASSW written from the abstract say so."""

from __future__ import annotations

import math

import polars as pl

from tasks.core.schema import SCORES
from tasks.stages.validate.board_notes import annotate
from tasks.stages.validate.leaderboard import LEADERBOARD, leaderboard


def _scores(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame([{"paper_id": "p", "reference": "r", **r} for r in rows], schema=SCORES)


def test_failed_judges_mark_their_columns_and_losses_are_counted() -> None:
    pairs = _scores([
        {"candidate": "a", "source": "m", "metric": "llm_judge", "score": 6.0, "eval_lm": "readout:local/smollm2"},
        {"candidate": "b", "source": "m", "metric": "tv_fvar_statement", "score": 0.1, "eval_lm": "readout:lm|float32"},
        {"candidate": "c", "source": "m", "metric": "kl_fvar_token", "score": 1.0, "eval_lm": "lm"},
        {"candidate": "d", "source": "m", "metric": "kl_fvar_token", "score": math.nan, "eval_lm": "lm",
         "reason": "ratio_overflow"},
        {"candidate": "e", "source": "m", "metric": "gem_s_assw", "score": 0.3, "eval_lm": "lm",
         "note": "assw_from_abstract"},
        {"candidate": "f", "source": "m", "metric": "gem_s_assw", "score": 0.2, "eval_lm": "lm"},
        {"candidate": "g", "source": "m", "metric": "bleu", "score": 0.2, "eval_lm": "sacrebleu"},
    ])
    per_candidate = pairs.select("paper_id", "candidate", "source", "metric", "eval_lm", "score")
    board = leaderboard(per_candidate)
    exam = pl.DataFrame({"model": ["local/smollm2", "local/smollm2", "readout:lm|float32"],
                         "role": ["judge", "judge", "oracle"], "test": ["consistency", "pertinence", "consistency"],
                         "passed": [False, True, True]})
    out = {r["metric"]: r for r in annotate(board, pairs, exam).iter_rows(named=True)}
    assert set(annotate(board, pairs, exam).columns) == set(LEADERBOARD.names())
    assert out["llm_judge"]["qualified"] is False
    assert out["llm_judge"]["note"] == "not qualified: judge local/smollm2 failed consistency"
    assert out["tv_fvar_statement"]["qualified"] is True and out["tv_fvar_statement"]["note"] is None
    assert out["kl_fvar_token"]["qualified"] is None            # no judging role behind it
    assert out["kl_fvar_token"]["note"] == "ratio_overflow: 1 of 2 pairs lost"
    assert out["gem_s_assw"]["note"].startswith("assw_from_abstract: 1 of 2 pairs conditioned on an ASSW")
    assert out["bleu"]["note"] is None and out["bleu"]["qualified"] is None
    # no exam in the run: nothing is marked
    assert annotate(board, pairs, None)["qualified"].null_count() == board.height


def test_gem_s_assw_rows_say_when_the_assw_came_from_the_abstract() -> None:
    """synopses_wide keeps what each ASSW was written from; gem_s_assw's rows on an abstract-made ASSW carry
    the note, the others none."""
    from tasks.core.frames import synopses_wide
    from tasks.core.schema import REFERENCES, SCORING_CANDIDATES
    from tasks.metrics import Resources, score_metrics

    def loglikelihood(requests: pl.DataFrame) -> pl.DataFrame:
        return pl.DataFrame({"key": requests["key"], "logprob": [-float(len(c)) for c in requests["continuation"]],
                             "n_tokens": [len(c.split()) + 1 for c in requests["continuation"]]},
                            schema={"key": pl.String, "logprob": pl.Float64, "n_tokens": pl.Int64})

    long = pl.DataFrame({"paper_id": ["p", "p", "q", "q"], "kind": ["abstract", "assw"] * 2,
                         "text": ["A.", "Strength: s.", "B.", "Strength: t."],
                         "source": ["abstract", "abstract", "abstract", "pdf_text"]})
    wide = synopses_wide(long)
    assert dict(wide.select("paper_id", "assw_source").iter_rows()) == {"p": "abstract", "q": "pdf_text"}
    refs = pl.DataFrame([{"paper_id": p, "review_id": f"{p}{i}", "review_text": "x", "judgments": f"line {p}{i}"}
                         for p in ("p", "q") for i in (1, 2)], schema=REFERENCES)
    cands = refs.select("paper_id", pl.col("review_id").alias("candidate"), pl.lit("human").alias("source"),
                        "review_id", "review_text", "judgments").cast(dict(SCORING_CANDIDATES))
    rows = score_metrics(["gem_s_assw", "gem_s_abstract"], cands, refs, wide,
                         Resources(eval_lm="lm", loglikelihood=loglikelihood))
    notes = {(m, p): set(g["note"].to_list()) for (m, p), g in rows.group_by("metric", "paper_id")}
    assert notes[("gem_s_assw", "p")] == {"assw_from_abstract"} and notes[("gem_s_assw", "q")] == {None}
    assert notes[("gem_s_abstract", "p")] == {None}
