"""References that may be AI-written (the reference flags): a Binoculars score per human reference on a real
(tiny) observer / performer pair, the `reference_flags` table, and the leaderboard's mean without
the flagged references, built by the real materialize step."""

from __future__ import annotations

import math

import duckdb
import polars as pl
import pytest

from tasks.core.layout import stage_dir, write_parquet
from tasks.core.schema import REFERENCE_FLAGS, SCORES, conform
from tasks.lm import ModelSpec
from tasks.report.site import build_site
from tasks.stages.materialize.build import build_database
from tasks.stages.score.reference_flags import reference_flags
from tests.stages.materialize.test_materialize import make_config, write_outputs
from tests.tiny_models import tiny_llama

WORDS = ["[UNK]", "<|end|>", "##", "Summary", "Strengths", "the", "paper", "is", "clear", "method", "novel", "results",
         "weak", "a", "good", "study"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[ModelSpec, ModelSpec]:
    folder = tmp_path_factory.mktemp("tiny")
    observer = tiny_llama(folder / "observer", WORDS, seed=1)
    performer = tiny_llama(folder / "performer", WORDS, seed=2)
    return ModelSpec(observer, dtype="float32", device="cpu"), ModelSpec(performer, dtype="float32", device="cpu")


def references() -> pl.DataFrame:
    return pl.DataFrame({"paper_id": ["p1", "p1", "p2"], "review_id": ["r1", "r2", "r3"],
                         "review_text": ["## Summary\nthe paper is clear\n## Strengths\nthe method is novel",
                                         "a good study the results is weak", ""]})


def test_every_reference_gets_a_score_and_the_threshold_flags(pair) -> None:
    flags = reference_flags(references(), pair, threshold=10.0)
    assert flags.schema == REFERENCE_FLAGS and flags["review_id"].to_list() == ["r1", "r2", "r3"]
    scores = flags["binoculars"].to_list()
    assert all(math.isfinite(v) and v > 0 for v in scores[:2])       # sections, and a text without headings
    assert math.isnan(scores[2]) and flags["reason"][2] == "no_text" and flags["flagged"][2] is None
    assert flags["flagged"].to_list()[:2] == [True, True]              # every finite score is below 10
    low = reference_flags(references(), pair, threshold=max(scores[:2]))   # the lower of the two is flagged
    assert low["flagged"].to_list()[:2] == [scores[0] < scores[1], scores[1] < scores[0]]
    assert low["observer"][0] == pair[0].resolved().key and low["performer"][0] == pair[1].resolved().key


def test_a_rerun_reuses_the_scores_of_unchanged_texts(pair, monkeypatch) -> None:
    first = reference_flags(references(), pair, threshold=10.0)
    import tasks.metrics

    asked: list[list] = []
    real = tasks.metrics.binoculars_scores
    monkeypatch.setattr(tasks.metrics, "binoculars_scores", lambda specs, texts: asked.append(list(texts)) or real(specs, texts))
    changed = references().with_columns(pl.when(pl.col("review_id") == "r2").then(pl.lit("the paper is weak"))
                                        .otherwise(pl.col("review_text")).alias("review_text"))
    again = reference_flags(changed, pair, threshold=0.5, earlier=first)
    assert asked == [["the paper is weak"]]                       # only the changed text is scored again
    assert again["binoculars"][0] == first["binoculars"][0] and again["flagged"][0] is (first["binoculars"][0] < 0.5)


def test_one_lm_as_both_observer_and_performer(pair) -> None:
    """The demo's single evaluation LM: its log-perplexity over its own entropy, a finite score."""
    flags = reference_flags(references(), (pair[0], pair[0]), threshold=0.9015)
    assert math.isfinite(flags["binoculars"][0]) and flags["observer"][0] == flags["performer"][0]


def test_a_served_evaluation_lm_gives_no_score() -> None:
    flags = reference_flags(references(), None, threshold=0.9015)
    assert flags["binoculars"].is_nan().all() and set(flags["reason"]) == {"binoculars_needs_local_lm"}


def board_row(model: str, mean: float) -> dict:
    return {"metric": "gem", "eval_lm": "lm", "rank": 1, "rank_low": 1, "rank_high": 1, "model": model,
            "kind": "generated", "is_human": False, "mean": mean, "ci_low": mean, "ci_high": mean, "confidence": 0.9,
            "n_papers": 2, "n_missing": 0, "n_excluded": 0, "tied_with": None, "reason": None, "predictor": None,
            "qualified": None, "note": None, "release_id": None}


def write_board(cfg) -> None:
    """Model A on two papers: against r1 (flagged) 1.0 and r2 0.0 on p1, against r3 0.5 on p2."""
    pairs = [("p1", "A/p1", "r1", 1.0), ("p1", "A/p1", "r2", 0.0), ("p2", "A/p2", "r3", 0.5)]
    scores = pl.DataFrame([{"paper_id": p, "candidate": c, "source": "A", "reference": r, "metric": "gem",
                            "score": s, "eval_lm": "lm"} for p, c, r, s in pairs])
    write_parquet(conform(scores, SCORES), stage_dir(cfg, "t", "score") / "scores.parquet")
    write_parquet(pl.DataFrame([board_row("A", 0.5)]), stage_dir(cfg, "t", "validate") / "leaderboard.parquet")


def write_flags(cfg, binoculars=(0.5, 1.2, 1.1), threshold=0.9015, flagged=(True, False, False),
                reason=(None, None, None)) -> None:
    """The reference flags of r1, r2 (paper p1) and r3 (p2), by default r1 alone flagged."""
    flags = pl.DataFrame({"paper_id": ["p1", "p1", "p2"], "review_id": ["r1", "r2", "r3"], "binoculars": list(binoculars),
                          "threshold": [threshold] * 3, "flagged": list(flagged), "reason": list(reason),
                          "observer": ["lm"] * 3, "performer": ["lm"] * 3})
    write_parquet(conform(flags, REFERENCE_FLAGS), stage_dir(cfg, "t", "score") / "reference_flags.parquet")


def test_the_leaderboard_without_the_flagged_references(tmp_path) -> None:
    cfg = make_config(tmp_path)
    write_outputs(cfg)
    write_board(cfg)
    write_flags(cfg, binoculars=(0.5, 1.2, math.nan), flagged=(True, False, None), reason=(None, None, "no_text"))
    result = build_database(cfg, "t")
    assert result.tables["reference_flags"] == 3
    with duckdb.connect(str(cfg.database), read_only=True) as con:
        row = con.execute("select mean, mean_unflagged, flagged_shift, n_flagged from leaderboard").fetchone()
        flagged = con.execute("select review_id from reference_flags where flagged").fetchall()
    # all pairs: p1 0.5, p2 0.5 -> 0.5; without r1: p1 0.0, p2 0.5 -> 0.25
    assert row == pytest.approx((0.5, 0.25, -0.25, 1)) and flagged == [("r1",)]
    page = (build_site(cfg.database, tmp_path / "site").out_dir / "leaderboard.html").read_text()
    assert "without flagged refs" in page and ">0.250<" in page and "-0.250 <span class=\"muted\">(1 flagged)" in page


def test_a_judge_that_read_a_flagged_reference_is_left_off_the_unflagged_board(tmp_path) -> None:
    """A judge scores a candidate once against all the paper's references (reference null): on p1 it
    read r1, which is flagged, so that score is not on the board without flagged references."""
    cfg = make_config(tmp_path)
    write_outputs(cfg)
    rows = [("p1", "A/p1", 9.0), ("p2", "A/p2", 3.0), ("p1", "r1", 7.0)]   # r1 as a candidate reads r2 only
    scores = pl.DataFrame([{"paper_id": p, "candidate": c, "source": "human" if c == "r1" else "A", "reference": None,
                            "metric": "llm_judge", "score": v, "eval_lm": "judge"} for p, c, v in rows])
    write_parquet(conform(scores, SCORES), stage_dir(cfg, "t", "score") / "scores.parquet")
    board = [{**board_row("A", 6.0), "metric": "llm_judge", "eval_lm": "judge"},
             {**board_row("human", 7.0), "metric": "llm_judge", "eval_lm": "judge", "kind": "human", "is_human": True}]
    write_parquet(pl.DataFrame(board), stage_dir(cfg, "t", "validate") / "leaderboard.parquet")
    write_flags(cfg)
    build_database(cfg, "t")
    with duckdb.connect(str(cfg.database), read_only=True) as con:
        got = dict(con.execute("select model, mean_unflagged from leaderboard").fetchall())
    assert got == {"A": 3.0, "human": 7.0}      # A's p1 score read r1; r1's own score did not read itself


def test_a_flagged_reference_drawn_as_a_negative_keeps_the_pair_off_the_unflagged_board(tmp_path) -> None:
    """An f-variational metric reads other papers' reviews as negatives: A's p2 pair (against r3, unflagged)
    drew r1, which is flagged, so the unflagged board drops it as it drops a flagged reference; a metric that
    reads no negatives keeps the same pair."""
    from tasks.core.schema import NEGATIVES

    cfg = make_config(tmp_path)
    write_outputs(cfg)
    pairs = [("p1", "A/p1", "r1", 1.0), ("p1", "A/p1", "r2", 0.0), ("p2", "A/p2", "r3", 0.5)]
    scores = pl.DataFrame([{"paper_id": p, "candidate": c, "source": "A", "reference": r, "metric": metric,
                            "score": v, "eval_lm": "lm"} for p, c, r, v in pairs for metric in ("tv_fvar_token", "gem")])
    write_parquet(conform(scores, SCORES), stage_dir(cfg, "t", "score") / "scores.parquet")
    drawn = [("p1", "A/p1", "r1", "r3", "p2"), ("p1", "A/p1", "r2", "r3", "p2"), ("p2", "A/p2", "r3", "r1", "p1")]
    negatives = pl.DataFrame([{"paper_id": p, "candidate": c, "reference": r, "draw": 0, "negative": n,
                               "negative_paper": q} for p, c, r, n, q in drawn])
    write_parquet(conform(negatives, NEGATIVES), stage_dir(cfg, "t", "score") / "negatives.parquet")
    board = [board_row("A", 0.5), {**board_row("A", 0.5), "metric": "tv_fvar_token"}]
    write_parquet(pl.DataFrame(board), stage_dir(cfg, "t", "validate") / "leaderboard.parquet")
    write_flags(cfg)
    build_database(cfg, "t")
    with duckdb.connect(str(cfg.database), read_only=True) as con:
        got = {m: (u, n) for m, u, n in con.execute("select metric, mean_unflagged, n_flagged from leaderboard").fetchall()}
    assert got["gem"] == (pytest.approx(0.25), 1)           # r1 left out as a reference only: p1 0.0, p2 0.5
    assert got["tv_fvar_token"] == (pytest.approx(0.0), 1)  # and as p2's negative: p1 0.0 alone


def test_without_reference_flags_the_columns_are_null(tmp_path) -> None:
    """Outputs scored before the flags existed still build the leaderboard, its new columns unknown."""
    cfg = make_config(tmp_path)
    write_outputs(cfg)
    write_board(cfg)
    result = build_database(cfg, "t")
    assert "reference_flags" not in result.tables and result.tables["leaderboard"] == 1
    with duckdb.connect(str(cfg.database), read_only=True) as con:
        assert con.execute("select mean, mean_unflagged, flagged_shift, n_flagged from leaderboard").fetchone() == \
            (0.5, None, None, None)


@pytest.mark.slow
def test_the_demo_lm_flags_the_synthetic_machine_review_and_not_a_human_one(embedded_lm) -> None:
    """The demo's setting: the embedded LM as observer and performer, Beyond Rating's threshold."""
    from tasks.testing.synthetic import MACHINE_REVIEW

    machine = "\n\n".join(f"## {name.title()}\n\n{text}" for name, text in MACHINE_REVIEW.items())
    human = ("## Summary\n\nthey swap the softmax for a sparsemax-like map in layers 3-7 and claim 2x speed; "
             "i reran their notebook and got 1.4x on an A100.\n\n## Weaknesses\n\n- table 2 mixes fp16 and fp32 "
             "baselines?\n- no seeds reported, fig 3 has no error bars")
    refs = pl.DataFrame({"paper_id": ["p", "p"], "review_id": ["machine", "human"], "review_text": [machine, human]})
    spec = ModelSpec()
    flags = reference_flags(refs, (spec, spec), threshold=0.9015)
    assert flags["flagged"].to_list() == [True, False], flags["binoculars"].to_list()


MARKER = "As an AI language model, I find this submission"


def test_a_judge_swayed_by_a_flagged_reference_is_off_the_board_without_flagged_references(tmp_path, monkeypatch):
    """The real judge (llm_judge through the Anthropic client and a local server) reads all of a paper's
    references at once; on p1 one of them is flagged and pulls the rating down. The board without flagged
    references must not keep that rating in any row, so its mean differs from the board's."""
    from tasks.core.config import LLMConfig
    from tasks.core.schema import REFERENCES, SCORING_CANDIDATES, SYNOPSES_WIDE
    from tasks.lm import make_lm
    from tasks.metrics import REGISTRY, Resources
    from tasks.metrics.judge import judge_family
    from tasks.testing.anthropic_server import AnthropicServer, user_text

    def responder(params):
        return "Score: 2" if MARKER in user_text(params) else "Score: 8"

    cfg = make_config(tmp_path)
    write_outputs(cfg)
    candidates = pl.DataFrame([{"paper_id": p, "candidate": f"A/{p}", "source": "A", "review_id": None,
                                "review_text": f"A careful review of {p}.", "judgments": None} for p in ("p1", "p2")],
                              schema=SCORING_CANDIDATES)
    references = pl.DataFrame([
        {"paper_id": "p1", "review_id": "r1", "review_text": f"{MARKER} to be weak.", "judgments": None},
        {"paper_id": "p1", "review_id": "r2", "review_text": "The proofs are sound.", "judgments": None},
        {"paper_id": "p2", "review_id": "r3", "review_text": "The experiments are thin.", "judgments": None}],
        schema=REFERENCES)
    synopses = pl.DataFrame([{"paper_id": p, "abstract": "A method."} for p in ("p1", "p2")], schema=SYNOPSES_WIDE)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "fake-test-key-flagged-judge")
    with AnthropicServer(responder) as server:
        judge = make_lm(LLMConfig(backend="anthropic", model="claude-test", use_batches=False, max_retries=0),
                        tmp_path / "llm", base_url=server.url)
        scores = judge_family([REGISTRY["llm_judge"]], candidates, references, None, synopses,
                              Resources(llm=judge, judge_method="generate")).scores
    assert scores["reference"].to_list() == [None, None]       # one rating per candidate, read against all
    assert dict(zip(scores["paper_id"], scores["score"], strict=True)) == {"p1": 2.0, "p2": 8.0}
    write_parquet(conform(scores.with_columns(eval_lm=pl.lit("judge")), SCORES),
                  stage_dir(cfg, "t", "score") / "scores.parquet")
    write_parquet(pl.DataFrame([{**board_row("A", 5.0), "metric": "llm_judge", "eval_lm": "judge"}]),
                  stage_dir(cfg, "t", "validate") / "leaderboard.parquet")
    write_flags(cfg)
    build_database(cfg, "t")
    with duckdb.connect(str(cfg.database), read_only=True) as con:
        row = con.execute("select mean, mean_unflagged, n_flagged, unflagged_reason from leaderboard").fetchone()
    assert row == (5.0, 8.0, 1, None)


def test_uncalibrated_flags_are_not_measured_rather_than_zero(tmp_path) -> None:
    """Binoculars without a calibrated threshold scores the references but flags none (flag null): the board
    says "not measured" with the reason, never "0 flagged, shift 0"."""
    cfg = make_config(tmp_path)
    write_outputs(cfg)
    write_board(cfg)
    write_flags(cfg, threshold=None, flagged=(None, None, None), reason=("binoculars_uncalibrated",) * 3)
    build_database(cfg, "t")
    with duckdb.connect(str(cfg.database), read_only=True) as con:
        row = con.execute("select mean, mean_unflagged, flagged_shift, n_flagged, unflagged_reason from leaderboard"
                          ).fetchone()
    assert row[:4] == (0.5, None, None, None)
    assert row[4] == "not measured: no reference could be flagged (binoculars_uncalibrated)"
