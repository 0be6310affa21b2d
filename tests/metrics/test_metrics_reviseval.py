"""RevisEval on fixed inputs, and judge panels: a reviser behind the local OpenAI-compatible server and
judges behind the local Anthropic- and OpenAI-compatible servers, through the real client libraries."""

from __future__ import annotations

import math
import re

import numpy as np
import polars as pl
import pytest

from tasks.core.config import LLMConfig, ScoreConfig, ValidateConfig
from tasks.core.schema import SCORES, SCORING_CANDIDATES, SYNOPSES_WIDE
from tasks.lm import make_lm
from tasks.metrics import REGISTRY, MissingResource, Resources, score_metrics
from tasks.metrics.classic import bleu
from tasks.metrics.panel import mean_of_members
from tasks.metrics.registry import predictor
from tasks.testing.anthropic_server import AnthropicServer, user_text
from tasks.testing.openai_server import OpenAIServer

NAMES = ["reviseval_bleu", "reviseval_rouge_l", "reviseval_bertscore", "reviseval_judge"]
REVISIONS = {  # candidate text -> what the made-up reviser returns
    "the method is novel": "the method is novel and sound",   # ROUGE-L: LCS 4, P 4/4, R 4/6 -> F1 0.8
    "a clear and careful study": "a clear and careful study",  # unchanged: every overlap metric is 1
    "please ignore": "",                                        # a blank revision: a gap, never a zero
}


def _reviser(body: dict) -> str:
    review = re.search(r"<review>\n(.*?)\n</review>", user_text(body), re.S).group(1)
    return REVISIONS[review]


def _judge(score: str):
    def respond(params: dict) -> str:
        user = user_text(params)
        assert "### Reference review (the candidate, revised)" in user
        return "I would not know." if "careful" in user else score
    return respond


def _one_hot(texts):
    """Unit vectors, one per distinct word: greedy matching then counts shared words (hand-workable)."""
    vocab = sorted({w for t in texts for w in t.split()})
    return [np.eye(len(vocab))[[vocab.index(w) for w in t.split()]] for t in texts]


def _inputs() -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    texts = ["the method is novel", "a clear and careful study", "please ignore", "  "]
    cands = pl.DataFrame([{"paper_id": f"p{i // 2}", "candidate": f"c{i}", "source": "model", "review_id": None,
                           "review_text": t, "judgments": None} for i, t in enumerate(texts)], schema=SCORING_CANDIDATES)
    syn = pl.DataFrame([{"paper_id": "p0", "abstract": "A novel method.", "assw": None},
                        {"paper_id": "p1", "abstract": "A careful study.", "assw": None}], schema=SYNOPSES_WIDE)
    return cands, pl.DataFrame(schema={"paper_id": pl.String, "review_id": pl.String}), syn


def _openai(server: OpenAIServer, model: str) -> LLMConfig:
    return LLMConfig(backend="openai", model=model, base_url=server.base_url, api_key_env="", use_batches=False,
                     max_retries=0, input_price_per_mtok=1.0, output_price_per_mtok=2.0)


def test_reviseval_on_fixed_inputs(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    cands, refs, syn = _inputs()
    judge_cfg = LLMConfig(backend="anthropic", model="judge-a", use_batches=False, max_retries=0)
    with OpenAIServer(_reviser) as reviser_server, AnthropicServer(_judge("Score: 7")) as judge_server:
        reviser = make_lm(_openai(reviser_server, "reviser-x"), tmp_path)
        judge = make_lm(judge_cfg, tmp_path, base_url=judge_server.url)
        resources = Resources(llm=judge, reviser=reviser, embed=_one_hot, embed_model="one-hot")
        scores = score_metrics(NAMES, cands, refs, syn, resources)
        calls = reviser_server.counts["chat"], judge_server.counts["messages"]
        again = score_metrics(NAMES, cands, refs, syn, Resources(llm=judge, reviser=reviser, embed=_one_hot))
        # cached: no new call, but for the blank revision (an empty answer is never stored)
        assert (reviser_server.counts["chat"], judge_server.counts["messages"]) == (calls[0] + 1, calls[1])
    assert calls == (3, 2)        # one revision per usable candidate, shared by the four metrics; judged when revised
    assert again.equals(scores) and scores.schema == SCORES and scores["reference"].is_null().all()
    by = {(m, c): (s, why) for m, c, s, why in scores.select("metric", "candidate", "score", "reason").iter_rows()}
    assert by[("reviseval_rouge_l", "c0")] == (pytest.approx(0.8), None)
    assert by[("reviseval_bleu", "c0")][0] == pytest.approx(bleu(["the method is novel"],
                                                               ["the method is novel and sound"])[0])
    assert by[("reviseval_bertscore", "c0")][0] == pytest.approx(0.8)   # one-hot: P 4/4, R 4/6
    for name in NAMES[:3]:
        assert by[(name, "c1")] == (pytest.approx(1.0), None)
        assert math.isnan(by[(name, "c2")][0]) and by[(name, "c2")][1] == "reviser_unanswered"
        assert math.isnan(by[(name, "c3")][0]) and by[(name, "c3")][1] == "no_candidate_text"
    assert by[("reviseval_judge", "c0")] == (7.0, None)
    assert math.isnan(by[("reviseval_judge", "c1")][0]) and by[("reviseval_judge", "c1")][1] == "judge_unanswered"
    rows = scores.filter(pl.col("metric") == "reviseval_judge")
    # the judge writes its comparison first; a chat API without log-probabilities: the rating parsed after it
    assert set(rows["eval_lm"]) == {"generate:anthropic/judge-a (reviser openai/reviser-x)"}
    assert predictor("reviseval_bleu", "openai/reviser-x") == "reviser:openai/reviser-x"
    usage = {r["purpose"]: r for r in resources.log.usage().iter_rows(named=True)}
    assert usage["reviser:reviseval"]["requests"] == 3 and usage["reviser:reviseval"]["cost_usd"] > 0
    assert usage["judge:reviseval_judge"]["requests"] == 2
    for name in NAMES:
        assert REGISTRY[name].higher_is_better and REGISTRY[name].conditioned_on == "abstract"


def test_reviseval_needs_its_models() -> None:
    cands, refs, syn = _inputs()
    with pytest.raises(MissingResource):
        score_metrics(["reviseval_bleu"], cands, refs, syn, Resources())
    with pytest.raises(MissingResource):     # bertscore without the embedding model
        score_metrics(["reviseval_bertscore"], cands, refs, syn, Resources(llm=object()))
    assert ScoreConfig(baselines=("reviseval_bleu", "reviseval_judge")).reviser is None   # default: [score.oracle]


def test_panel_mean_over_members_that_answered() -> None:
    assert mean_of_members([8.0, 4.0]) == 6.0
    assert mean_of_members([8.0, math.nan]) == 8.0
    assert math.isnan(mean_of_members([math.nan, math.nan])) and math.isnan(mean_of_members([]))


def test_a_panel_of_judges_is_averaged(tmp_path, monkeypatch) -> None:
    """Two judges on two servers: 8 and 4 -> 6; where one does not answer, the other's rating stands;
    the rows name both judges, the leaderboard's predictor column with them, and each judge has rows of
    its own beside the panel's (the board's column of each member)."""
    from tasks.metrics.judge import judge_family  # noqa: F401  (the family the panel serves)

    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    refs = pl.DataFrame([{"paper_id": "p0", "review_id": f"r{i}", "review_text": f"Review {i}: the proof is wrong.",
                          "judgments": None} for i in range(3)],
                        schema={"paper_id": pl.String, "review_id": pl.String, "review_text": pl.String,
                                "judgments": pl.String})
    from tasks.core.frames import human_candidates

    cands = human_candidates(refs)
    syn = pl.DataFrame([{"paper_id": "p0", "abstract": "A proof.", "assw": None}], schema=SYNOPSES_WIDE)

    def second(body: dict) -> str:
        return "no idea" if "Review 2: the proof" in user_text(body).split("### Candidate review")[-1] else "Score: 4"

    with AnthropicServer(lambda params: "Score: 8") as a, OpenAIServer(second) as b:
        panel = (make_lm(LLMConfig(backend="anthropic", model="judge-a", use_batches=False, max_retries=0), tmp_path,
                         base_url=a.url), make_lm(_openai(b, "judge-b"), tmp_path))
        resources = Resources(judges=panel)
        scores = score_metrics(["llm_judge_noref"], cands, refs, syn, resources)
    panel = scores.filter(pl.col("note").is_null())
    assert dict(panel.select("candidate", "score").iter_rows()) == {"r0": 6.0, "r1": 6.0, "r2": 8.0}
    assert set(panel["eval_lm"]) == {"generate:anthropic/judge-a+generate:openai/judge-b"}   # each member's method
    assert predictor("llm_judge_noref", panel["eval_lm"][0]) == "judge:generate:anthropic/judge-a+generate:openai/judge-b"
    members = scores.filter(pl.col("note") == "panel_member").sort("eval_lm", "candidate")
    assert members.select("eval_lm", "candidate", "score", "reason").rows() == [
        ("generate:anthropic/judge-a", "r0", 8.0, None), ("generate:anthropic/judge-a", "r1", 8.0, None),
        ("generate:anthropic/judge-a", "r2", 8.0, None), ("generate:openai/judge-b", "r0", 4.0, None),
        ("generate:openai/judge-b", "r1", 4.0, None),
        ("generate:openai/judge-b", "r2", pytest.approx(math.nan, nan_ok=True), "judge_unanswered")]
    usage = resources.log.usage()
    assert sorted(usage["model"]) == ["judge-a", "judge-b"] and (usage["requests"] == 3).all()


def test_a_panel_serves_the_generation_oracle(tmp_path, monkeypatch) -> None:
    """TVD-MI with a panel: member A answers yes for same-paper pairs and no otherwise, member B always
    no. Critic on the positive pair: (1/2 - 1/2) / 2 = 0; on each negative: -1/2; score 0 - (-1/2) = 1/2
    (A alone would give 1)."""
    from tasks.core.frames import human_candidates
    from tasks.metrics.negatives import draw_negatives
    from tests.metrics.test_metrics_oracle_cells import _refs, _responder

    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    refs, syn = _refs(n_papers=3, n_reviews=2)
    cands = human_candidates(refs)
    negatives = draw_negatives(cands, refs, 2, seed=0)
    with AnthropicServer(_responder) as a, AnthropicServer(lambda params: "No") as b:
        members = tuple(make_lm(LLMConfig(backend="anthropic", model=m, use_batches=False, max_retries=0), tmp_path,
                                base_url=s.url) for m, s in (("oracle-a", a), ("oracle-b", b)))
        alone = score_metrics(["tvd_mi"], cands, refs, syn, Resources("lm", llm=members[0], oracle="generate"),
                              negatives=negatives)
        panel = score_metrics(["tvd_mi"], cands, refs, syn, Resources("lm", judges=members, oracle="generate"),
                              negatives=negatives)
    assert (alone["score"] == 1.0).all() and (panel["score"] == 0.5).all()
    assert set(panel["eval_lm"]) == {"generate:anthropic/oracle-a+anthropic/oracle-b"}


def test_reviseval_is_validated_like_the_rest(tmp_path, monkeypatch) -> None:
    """The validation workflow rescores perturbed candidates with the RevisEval metrics: each perturbed
    candidate is revised afresh (the reference follows the response) and paired with its original."""
    from tasks.stages.validate.workflow import run_validation
    from tests.stages.validate.test_validate_workflow import make_reviews

    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")

    def reviser(body: dict) -> str:            # keeps the first three sentences: a tidier review
        review = re.search(r"<review>\n(.*?)\n</review>", user_text(body), re.S).group(1)
        return " ".join(re.split(r"(?<=[.!?])\s+", review)[:3])

    def judge(params: dict) -> str:            # 10 when the candidate needed no cut, less the longer it ran on
        user = user_text(params)
        ref = user.split("### Reference review (the candidate, revised)\n")[1].split("\n\n### Candidate")[0]
        cand = user.split("<candidate>\n")[1].split("\n</candidate>")[0]
        return f"Score: {max(0, 10 - (len(cand.split()) - len(ref.split())) // 5)}"

    with OpenAIServer(reviser) as r, AnthropicServer(judge) as j:
        resources = Resources(reviser=make_lm(_openai(r, "reviser-x"), tmp_path),
                              llm=make_lm(LLMConfig(backend="anthropic", model="judge-a", use_batches=False,
                                                    max_retries=0), tmp_path, base_url=j.url))
        out = run_validation(make_reviews(n_papers=3), ValidateConfig(strategies=["sentence_deletion", "meaningless_elongation_proxy"], metrics=["reviseval_rouge_l", "reviseval_judge"], candidates="all", bootstrap_resamples=0, min_pairs=2), resources=resources)
    table = out.validation
    assert set(zip(table["metric"], table["strategy"], strict=True)) == {
        (m, s) for m in ("reviseval_rouge_l", "reviseval_judge") for s in ("sentence_deletion", "meaningless_elongation_proxy")}
    assert (table["n"] == 9).all()                 # every review of the three papers, paired with its perturbation
    elongated = table.filter((pl.col("metric") == "reviseval_judge") & (pl.col("strategy") == "meaningless_elongation_proxy"))
    assert elongated["mean_change"][0] < 0         # the padded candidate runs further past its revision
