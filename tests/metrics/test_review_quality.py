"""The review-quality metrics end to end through the registry: points, matching and question
prompts answered by the local Anthropic-compatible server through the real client, values checked
against hand-worked numbers; repairs, rejects and the cache."""

from __future__ import annotations

import math
import re

import numpy as np
import polars as pl
import pytest

from tasks.core.config import LLMConfig, ValidateConfig
from tasks.core.frames import human_candidates
from tasks.core.schema import REFERENCES, SCORING_CANDIDATES, SYNOPSES_WIDE
from tasks.lm import make_lm
from tasks.metrics import REGISTRY, MissingResource, Resources, score_metrics, score_with_tables
from tasks.metrics.review_quality.formulas import CATEGORIES
from tasks.metrics.review_quality.points import parse_points
from tasks.metrics.review_quality.questions import chunks
from tasks.metrics.review_quality.work import (
    PAPER_FACTS,
    REVIEW_FACTS,
    QualitySettings,
    QualityWork,
    ReviewFacts,
)
from tasks.testing.anthropic_server import AnthropicServer, system_text, user_text

KEYWORDS = ("novel", "baseline", "writing", "threshold", "proof", "momentum")
CATEGORY = {"novel": "Novelty", "baseline": "Experiments", "dataset": "Experiments", "writing": "Clarity",
            "proof": "Soundness", "theory": "Soundness", "threshold": "Soundness"}
PAPER = "We set a threshold for the detector and compare against two baselines on three datasets. " * 3


def review(strengths: str | None, weaknesses: str | None, questions: str | None = None, merged: str | None = None,
           summary: str = "The paper proposes a detector with a threshold.") -> str:
    parts = [("Summary", summary), ("Strengths", strengths), ("Weaknesses", weaknesses),
             ("Strengths and Weaknesses", merged), ("Questions", questions)]
    return "\n\n".join(f"## {t}\n\n{b}" for t, b in parts if b)


def category(text: str) -> str:
    return next((c for k, c in CATEGORY.items() if k in text.lower()), "Other")


def responder(params: dict) -> str:
    system, user = system_text(params), user_text(params)
    if "atomic points" in system:
        body = re.search(r"<text>\n(.*)\n</text>", user, re.DOTALL).group(1)
        if "UNPARSEABLE" in body:
            return "I would rather not."
        part = re.search(r"Part of the review: (.*)", user).group(1)
        lines = ["Points:"]                                   # a line with no category: dropped
        for s in (s.strip() for s in re.split(r"(?<=[.?])\s+", body) if s.strip()):
            if part == "Questions":
                kind = "Explain" if s.startswith("How") else "Supplement"
                lines.append(f"{kind} / {category(s)}: {s}")
            elif part == "Strengths and Weaknesses":
                stance = "Strength" if "novel" in s else "Weakness"
                lines.append(f"{stance} / {category(s)}: {s}")
            elif part == "Strengths":
                lines.append(f"- **{category(s).lower()}**: {s}")   # repaired: bullet, emphasis, case
            else:
                lines.append(f"{category(s)}: {s}")
        return "\n".join(lines)
    if "two points" in system:
        a, b = (re.search(f"<point_{x}>\n(.*?)\n</point_{x}>", user, re.DOTALL).group(1).lower() for x in "ab")
        return "Yes" if any(k in a and k in b for k in KEYWORDS) else "No"
    if "question a reviewer asked" in system:
        question = re.search(r"<question>\n(.*?)\n</question>", user, re.DOTALL).group(1).lower()
        passages = " ".join(re.findall(r"<passage>\n(.*?)\n</passage>", user, re.DOTALL)).lower()
        asked = {"threshold", "ablation", "momentum"} & set(re.findall(r"\w+", question))
        return "Yes" if any(k in passages for k in asked) else "No"
    return "?"


def bag_of_words(texts):
    """Token vectors of a transparent embedding: one hashed one-hot vector per lower-cased word."""
    out = []
    for text in texts:
        words = re.findall(r"[a-z]+", text.lower()) or ["empty"]
        m = np.zeros((len(words), 64))
        for i, w in enumerate(words):
            m[i, sum(map(ord, w)) % 64] = 1.0
        out.append(m)
    return out


def inputs():
    refs = pl.DataFrame([
        {"paper_id": "p0", "review_id": "r0", "review_text": review(
            "The method is novel and original.", "The baselines are weak and outdated. The writing is unclear here.",
            "How is the threshold chosen in practice?")},
        {"paper_id": "p0", "review_id": "r1", "review_text": review(
            "The writing is clear and easy to follow.", "The baselines are weak and dated.",
            "Could the authors add an ablation study?")},
        {"paper_id": "p0", "review_id": "r2", "review_text": review(
            None, None, merged="The method is novel indeed. The proofs have a gap.")},
        {"paper_id": "p1", "review_id": "s0", "review_text": review("The method is novel and simple.",
                                                                     "UNPARSEABLE weakness text here.")},
        {"paper_id": "p1", "review_id": "s1", "review_text": review("The writing is clear throughout.",
                                                                     "The baselines are weak overall.")},
    ], schema=REFERENCES)
    generated = pl.DataFrame([
        {"paper_id": "p0", "candidate": "modelA/p0", "source": "modelA", "review_id": None, "review_text": review(
            "The method is novel in its design.",
            "The baselines are weak in the experiments. The theory lacks a convergence proof. "
            "The evaluation uses few datasets overall.",
            "How is the threshold chosen for each dataset? How does the momentum schedule affect training?")},
        {"paper_id": "p1", "candidate": "modelA/p1", "source": "modelA", "review_id": None,
         "review_text": review("The writing is clear.", "The baselines are weak.", summary="")},
    ], schema=SCORING_CANDIDATES)
    cands = pl.concat([human_candidates(refs).cast(dict(SCORING_CANDIDATES)), generated])
    facts = ReviewFacts(
        pl.DataFrame([{"review_id": "r0", "paper_id": "p0", "rating": 3.0}, {"review_id": "r1", "paper_id": "p0", "rating": 5.0},
                      {"review_id": "r2", "paper_id": "p0", "rating": 6.0}, {"review_id": "s0", "paper_id": "p1", "rating": 8.0},
                      {"review_id": "s1", "paper_id": "p1", "rating": 6.0},
                      {"review_id": "modelA/p0", "paper_id": "p0", "rating_answer": "5: marginally below"},
                      {"review_id": "modelA/p1", "paper_id": "p1", "rating_answer": "7"}], schema=REVIEW_FACTS),
        pl.DataFrame([{"paper_id": "p0", "decision": "Reject", "text": PAPER},
                      {"paper_id": "p1", "decision": None, "text": None}], schema=PAPER_FACTS))
    syn = pl.DataFrame([{"paper_id": "p0", "abstract": "A detector."}, {"paper_id": "p1", "abstract": "Another."}],
                       schema=SYNOPSES_WIDE)
    return refs, cands, facts, syn


NAMES = [n for n, m in REGISTRY.items() if m.needs.name == "review_quality"]


def test_parse_points_repairs_drops_and_labels() -> None:
    got = parse_points("Points:\n- **experiment**: The ablation is missing here.\n2. Originality: A new angle on "
                       "detection.\nNovelty: too short\nBogus: not a category at all\nClarity: 1. The notation is "
                       "overloaded.\nSoundness: 1.5", "weaknesses")
    assert [p["category"] for p in got.points] == ["Experiments", "Novelty", "Clarity"]
    assert got.points[2]["text"] == "The notation is overloaded."
    assert got.repaired == 3 and got.dropped == 4
    q = parse_points("explain / soundness: Why does the bound hold here?\nSoundness: No kind given here.", "questions")
    assert q.points == [{"category": "Soundness", "text": "Why does the bound hold here?", "kind": "Explain"}]
    assert q.dropped == 1
    sw = parse_points("Weakness / Related Work: Prior detectors are not cited.", "strengths_and_weaknesses")
    assert sw.points[0]["stance"] == "Weakness" and sw.points[0]["category"] == "Related Work"


def test_chunks_overlap() -> None:
    words = " ".join(f"w{i}" for i in range(10))
    assert chunks(words, 4, 1) == ["w0 w1 w2 w3", "w3 w4 w5 w6", "w6 w7 w8 w9"]
    assert chunks("", 4, 1) == [] and chunks("a b", 4, 1) == ["a b"]
    with pytest.raises(ValueError):
        chunks(words, 4, 4)


def test_metrics_through_the_anthropic_server(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    refs, cands, facts, syn = inputs()
    cfg = LLMConfig(backend="anthropic", model="claude-test", use_batches=False, max_retries=0)
    with pytest.raises(MissingResource, match="review_quality"):
        score_metrics(["rating_mae"], cands, refs, syn, Resources("lm"))
    with AnthropicServer(responder) as server:
        llm = make_lm(cfg, tmp_path, base_url=server.url)
        work = QualityWork(QualitySettings(match_top_k=10), facts, llm)
        scored = score_with_tables(NAMES, cands, refs, syn, Resources("lm", embed=bag_of_words, quality=work))
        scores = scored.scores
        calls = server.counts["messages"]
        again = score_metrics(NAMES, cands, refs, syn, Resources("lm", embed=bag_of_words,
                                                                  quality=QualityWork(QualitySettings(match_top_k=10), facts, llm)))
        assert server.counts["messages"] == calls                 # cached: a rerun makes no call
    assert again.equals(scores)
    assert scores["reference"].is_null().all() and scores.height == len(NAMES) * cands.height
    got = {(c, m): (s, r) for c, m, s, r in scores.select("candidate", "metric", "score", "reason").iter_rows()}

    def value(c: str, m: str) -> float:
        assert got[(c, m)][1] is None, got[(c, m)]
        return got[(c, m)][0]

    # the generated candidate of p0: 1 strength matching r0 and r2; weaknesses: baselines (r0, r1), proof (r2), datasets (none)
    assert value("modelA/p0", "points_precision_strengths") == 1.0
    assert value("modelA/p0", "points_recall_strengths") == 1.0
    assert value("modelA/p0", "points_precision_weaknesses") == pytest.approx(2 / 3)
    assert value("modelA/p0", "points_recall_weaknesses") == 1.0          # r1 (1 of 1) and r2 (1 of 1)
    assert value("modelA/p0", "points_f1_weaknesses") == pytest.approx(0.8)
    # r0 as a candidate against r1 and r2: writing matches nothing among their weaknesses
    assert value("r0", "points_precision_weaknesses") == 0.5 and value("r0", "points_recall_weaknesses") == 1.0
    assert value("r1", "points_recall_strengths") == 0.0                 # r1's writing strength: r0, r2 praise novelty
    # r2's merged field was split by the LLM into one strength and one weakness
    assert value("r2", "points_precision_strengths") == 1.0 and value("r2", "points_precision_weaknesses") == 0.0
    # the unparseable field of s0 is rejected: s1 is then compared with a reviewer with no weakness points
    assert got[("s1", "points_recall_weaknesses")] == (pytest.approx(math.nan, nan_ok=True), "no_reference_points")
    rejects = scored.tables["rejects"]
    assert rejects.select("entity_id", "rule").rows() == [("s0#weaknesses", "points_unparsed")]
    # focus KL per candidate: the paper's human weakness categories against the candidate's own (eq. 4 on one paper)
    points = scored.tables["points"].filter(pl.col("field") == "weaknesses")

    def counts(ids: list[str]) -> np.ndarray:
        found = points.filter(pl.col("review_id").is_in(ids))["category"].to_list()
        return np.array([found.count(c) for c in CATEGORIES], dtype=float)

    h, a = (counts(["r0", "r1", "r2"]) + 1), (counts(["modelA/p0"]) + 1)
    h, a = h / h.sum(), a / a.sum()
    assert value("modelA/p0", "focus_kl_weaknesses") == pytest.approx(float(np.sum(h * np.log(h / a))))
    assert value("modelA/p1", "focus_kl_weaknesses") != value("modelA/p0", "focus_kl_weaknesses")
    # questions: threshold (Explain, in the paper: 1), momentum (Explain, not in the paper: 0); r1 asks for a
    # missing ablation (Supplement: 1); s0 has no questions
    assert value("modelA/p0", "question_score") == 0.5 and value("r1", "question_score") == 1.0
    assert got[("s0", "question_score")][1] == "no_question_points"
    assert got[("modelA/p1", "question_score")][1] == "no_question_points"
    assert 0 < value("r0", "summary_coverage") <= 1.0 and got[("modelA/p1", "summary_coverage")][1] == "no_summary"
    # ratings: modelA says 5 on p0 (humans 3, 5, 6; decision Reject); r0 says 3 against r1, r2 (5, 6)
    assert value("modelA/p0", "rating_mae") == pytest.approx(abs(5 - 14 / 3))
    assert value("modelA/p0", "accept_accuracy") == 1.0
    assert value("r0", "rating_mae") == pytest.approx(2.5) and value("r2", "accept_accuracy") == 0.0
    assert got[("modelA/p1", "rating_mae")][1] == "rating_off_scale"
    assert got[("s0", "accept_accuracy")][1] == "no_decision"
    assert got[("r0", "binoculars")][1] == "binoculars_needs_two_lms"
    # the tables behind the scores
    points = scored.tables["points"]
    assert points.filter(pl.col("review_id") == "r2")["split_from"].to_list() == ["strengths_and_weaknesses"] * 2
    assert scored.counts["points_repaired"] > 0 and scored.counts["points_dropped_lines"] > 0
    assert scored.counts["points_retried"] == 1
    matches = scored.tables["point_matches"]
    assert matches["asked"].all() and matches["match"].is_not_null().all()


def test_the_embedding_pre_filter_asks_only_the_top_k(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    refs, cands, facts, syn = inputs()
    cfg = LLMConfig(backend="anthropic", model="claude-test", use_batches=False, max_retries=0)
    with AnthropicServer(responder) as server:
        work = QualityWork(QualitySettings(match_top_k=1), facts, make_lm(cfg, tmp_path, base_url=server.url))
        scored = score_with_tables(["points_precision_weaknesses"], cands, refs, syn,
                                   Resources("lm", embed=bag_of_words, quality=work))
    scores, m = scored.scores, scored.tables["point_matches"]
    per_point = m.group_by("candidate", "field", "a_position").agg(pl.col("asked").sum())
    assert (per_point["asked"] == 1).all()
    # the one asked is the most similar, and the rest are 0 without a call
    assert (m.filter(~pl.col("asked"))["match"] == 0).all()
    best = m.sort("similarity", descending=True).group_by("candidate", "field", "a_position", maintain_order=True).first()
    assert best["asked"].all()
    assert scores.filter(pl.col("candidate") == "modelA/p0")["score"].item() == pytest.approx(2 / 3)


def test_a_perturbed_copy_of_a_human_review_is_split_from_its_own_text(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    refs, cands, facts, syn = inputs()
    copy = pl.DataFrame([{"paper_id": "p0", "candidate": "r0~cut", "source": "human", "review_id": "r0",
                          "review_text": review("The method is novel and original.", None)}], schema=SCORING_CANDIDATES)
    cands = pl.concat([cands.filter(pl.col("candidate") == "r0"), copy])
    cfg = LLMConfig(backend="anthropic", model="claude-test", use_batches=False, max_retries=0)
    with AnthropicServer(responder) as server:
        work = QualityWork(QualitySettings(match_top_k=10), facts, make_lm(cfg, tmp_path, base_url=server.url))
        scored = score_with_tables(["points_precision_weaknesses", "points_precision_strengths", "rating_mae"], cands,
                                   refs, syn, Resources("lm", embed=bag_of_words, quality=work))
    scores = scored.scores
    got = {(c, m): (s, r) for c, m, s, r in scores.select("candidate", "metric", "score", "reason").iter_rows()}
    assert got[("r0", "points_precision_weaknesses")] == (0.5, None)
    assert got[("r0~cut", "points_precision_weaknesses")][1] == "no_candidate_field"   # its weaknesses were cut
    assert got[("r0~cut", "rating_mae")] == got[("r0", "rating_mae")]          # the reviewer's rating, unchanged
    own = scored.tables["points"].filter(pl.col("review_id") == "r0~cut")   # split under its own id: strengths only
    assert set(own["field"]) == {"strengths"}


def test_a_review_without_points_is_nan_with_a_reason_never_zero(tmp_path, monkeypatch) -> None:
    """A generated review that is all summary (what a small model writes when its tokens run out) has
    no weaknesses to extract, and one whose weaknesses cannot be read has no points: recall, precision
    and F1 are NaN with the reason, not 0, while the humans they would be matched against have points."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    refs, cands, facts, syn = inputs()
    silent = pl.DataFrame([
        {"paper_id": "p0", "candidate": "tiny/p0", "source": "tiny", "review_id": None,
         "review_text": review(None, None, summary="The paper was cut to fit. The paper was cut to fit.")},
        {"paper_id": "p0", "candidate": "garbled/p0", "source": "garbled", "review_id": None,
         "review_text": review("The method is novel in its design.", "UNPARSEABLE weakness text here.")},
    ], schema=SCORING_CANDIDATES)
    cands = pl.concat([cands.filter(pl.col("candidate") == "modelA/p0"), silent])
    names = ["points_precision_weaknesses", "points_recall_weaknesses", "points_f1_weaknesses"]
    cfg = LLMConfig(backend="anthropic", model="claude-test", use_batches=False, max_retries=0)
    with AnthropicServer(responder) as server:
        work = QualityWork(QualitySettings(match_top_k=10), facts, make_lm(cfg, tmp_path, base_url=server.url))
        scored = score_with_tables(names, cands, refs, syn, Resources("lm", embed=bag_of_words, quality=work))
    got = {(c, m): (s, r) for c, m, s, r in scored.scores.select("candidate", "metric", "score", "reason").iter_rows()}
    for name in names:
        value, why = got[("tiny/p0", name)]
        assert math.isnan(value) and why == "no_candidate_field"
        value, why = got[("garbled/p0", name)]
        assert math.isnan(value) and why == "no_candidate_points"
        assert got[("modelA/p0", name)][1] is None                     # the review with points is measured
    assert got[("modelA/p0", "points_recall_weaknesses")][0] == 1.0
    assert "garbled/p0#weaknesses" in scored.tables["rejects"]["entity_id"].to_list()   # why: in the rejects
    # the points were extracted for the generated reviews that have some, and matched
    assert "modelA/p0" in scored.tables["points"]["review_id"].to_list()
    assert "modelA/p0" in scored.tables["point_matches"]["candidate"].to_list()


# ---- the embedded SmolLM2 and MiniLM on CPU -----------------------------------------------------
@pytest.mark.slow
def test_points_matching_and_rating_on_the_embedded_lm(tmp_path, embedded_lm) -> None:
    from tasks.metrics.resources import token_embeddings

    refs = pl.DataFrame([
        {"paper_id": "p0", "review_id": "r0", "review_text": review(
            None, "The experiments use only one small dataset.", "How is the detection threshold chosen?")},
        {"paper_id": "p0", "review_id": "r1", "review_text": review(
            None, "The evaluation is limited to a single small dataset.")},
    ], schema=REFERENCES)
    cands = human_candidates(refs).cast(dict(SCORING_CANDIDATES))
    facts = ReviewFacts(pl.DataFrame([{"review_id": "r0", "paper_id": "p0", "rating": 3.0},
                                      {"review_id": "r1", "paper_id": "p0", "rating": 5.0}], schema=REVIEW_FACTS),
                        pl.DataFrame([{"paper_id": "p0", "decision": "Reject", "text": PAPER}], schema=PAPER_FACTS))
    syn = pl.DataFrame([{"paper_id": "p0", "abstract": "A detector."}], schema=SYNOPSES_WIDE)
    cfg = LLMConfig(backend="local", model="smollm2", batch_size=4)
    names = ["points_precision_weaknesses", "points_recall_weaknesses", "rating_mae", "accept_accuracy",
             "question_score"]
    settings = QualitySettings(match_top_k=1, points_max_tokens=48)
    work = QualityWork(settings, facts, make_lm(cfg, tmp_path))
    scored = score_with_tables(names, cands, refs, syn, Resources("lm", embed=token_embeddings, quality=work))
    scores, points = scored.scores, scored.tables["points"]
    # each weakness became points with a canonical category (the decoding constraint), or a reject with its reason
    rejected = {r.split("#")[0] for r in scored.tables.get("rejects", pl.DataFrame()).get_column(
        "entity_id", default=pl.Series([]))}
    assert set(points["review_id"]) | rejected == {"r0", "r1"} and points.height >= 1
    assert points["category"].is_in(list(CATEGORIES)).all()
    got = {(c, m): (s, r) for c, m, s, r in scores.select("candidate", "metric", "score", "reason").iter_rows()}
    for c in ("r0", "r1"):
        for m in names[:2]:
            s, why = got[(c, m)]
            assert (0.0 <= s <= 1.0 and why is None) or (math.isnan(s) and why in {"match_unanswered", "no_candidate_points",
                                                                                   "no_reference_points"})
    assert got[("r0", "rating_mae")] == (2.0, None) and got[("r1", "accept_accuracy")] == (1.0, None)
    # the question prompt on the embedded LM: a 0 / 1 check, or a gap with its reason, never a guess
    q, why = got[("r0", "question_score")]
    assert (q in (0.0, 1.0) and why is None) or why in {"no_question_points", "question_unanswered"}
    assert got[("r1", "question_score")][1] == "no_question_points"
    again = QualityWork(settings, facts, make_lm(cfg, tmp_path))
    assert score_metrics(names, cands, refs, syn, Resources("lm", embed=token_embeddings, quality=again)).equals(scores)


@pytest.mark.parametrize("form", ["review-fields-v1", "review-rated-brief-v1"])   # the rating last, and first
def test_review_fields_prompt_keeps_rating_and_confidence_apart_from_the_text(tmp_path, monkeypatch, form) -> None:
    from datetime import UTC, datetime

    from tasks.core.config import CandidateConfig
    from tasks.metrics.review_quality.fields import parse_rating
    from tasks.stages.generate.reviews import generate_reviews

    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    def fields_review(params: dict) -> str:
        assert "<rating>" in system_text(params) and "1, 3, 5, 6, 8, 10" in system_text(params)
        return ("<summary>The paper proposes a sparse detector for topics.</summary>\n<strengths>\n1. A clear and "
                "simple method.\n</strengths>\n<weaknesses>\n1. Only one small dataset is used.\n</weaknesses>\n"
                "<questions>\nHow does it scale to larger corpora?\n</questions>\n"
                f"<rating>\n{'excellent' if 'graphs' in user_text(params) else '6: marginally above the threshold'}"
                "\n</rating>\n<confidence>\n4\n</confidence>")

    papers = pl.DataFrame({"paper_id": ["P0", "P1"], "venue_id": ["V"] * 2, "title": ["A", "B"],
                           "abstract": ["An abstract about sparse topic detection.", "An abstract about graphs."],
                           "first_public_at": [datetime(2024, 5, 1, tzinfo=UTC)] * 2, "in_benchmark": [True] * 2})
    candidate = CandidateConfig(name="c", backend="anthropic", model="claude-test", knowledge_cutoff="2023-12-31",
                                use_batches=False, max_retries=0, prompt_version=form)
    with AnthropicServer(fields_review) as server:
        out = generate_reviews(papers, None, candidate, make_lm(candidate, tmp_path, base_url=server.url))
    rows = {r["paper_id"]: r for r in out.candidates.iter_rows(named=True)}
    assert rows["P0"]["rating_answer"] == "6: marginally above the threshold" and rows["P0"]["confidence_answer"] == "4"
    assert "Rating" not in rows["P0"]["review"] and rows["P0"]["review"].endswith("larger corpora?")
    assert parse_rating(rows["P0"]["rating_answer"], (1, 3, 5, 6, 8, 10)) == (6.0, None)
    assert parse_rating(rows["P1"]["rating_answer"], (1, 3, 5, 6, 8, 10))[1] == "unparsed_rating"
    # the rating a review states is kept; a chat API without log-probabilities that cannot continue an
    # answer leaves the other unrated
    assert {p: (r["rating"], r["rating_method"]) for p, r in rows.items()} == {"P0": (6.0, "stated"), "P1": (None, "answer")}


def test_validation_perturbs_the_text_and_rescores_review_quality(tmp_path, monkeypatch) -> None:
    from tasks.stages.validate.workflow import run_validation

    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    refs, _, facts, syn = inputs()
    reviews = refs.select("paper_id", "review_id", "review_text")
    cfg = LLMConfig(backend="anthropic", model="claude-test", use_batches=False, max_retries=0)
    with AnthropicServer(responder) as server:
        work = QualityWork(QualitySettings(match_top_k=10), facts, make_lm(cfg, tmp_path, base_url=server.url))
        result = run_validation(reviews, ValidateConfig(strategies=["sentence_deletion"], metrics=["points_recall_weaknesses",
                                                                                    "rating_mae"], candidates="all", min_pairs=2, bootstrap_resamples=50), resources=Resources("lm", embed=bag_of_words, quality=work))
    table = {m: row for m, row in zip(result.validation["metric"], result.validation.iter_rows(named=True), strict=True)}
    assert set(table) == {"points_recall_weaknesses", "rating_mae"}
    # a reviewer's rating does not move when the text is cut: the rating outcome cannot detect the degradation
    assert table["rating_mae"]["mean_change"] == 0.0 and table["rating_mae"]["passed"] is not True
    assert table["points_recall_weaknesses"]["n"] >= 2


def test_questions_without_any_paper_text_are_a_gap(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    refs = pl.DataFrame([{"paper_id": "p9", "review_id": f"q{i}", "review_text": review(
        None, None, "How is the threshold chosen in practice?")} for i in range(2)], schema=REFERENCES)
    facts = ReviewFacts(pl.DataFrame(schema=REVIEW_FACTS), pl.DataFrame([{"paper_id": "p9"}], schema=PAPER_FACTS))
    syn = pl.DataFrame([{"paper_id": "p9", "abstract": None}], schema=SYNOPSES_WIDE)
    cfg = LLMConfig(backend="anthropic", model="claude-test", use_batches=False, max_retries=0)
    with AnthropicServer(responder) as server:
        work = QualityWork(QualitySettings(), facts, make_lm(cfg, tmp_path, base_url=server.url))
        scores = score_metrics(["question_score", "summary_coverage"], human_candidates(refs), refs, syn,
                               Resources("lm", embed=bag_of_words, quality=work))
    assert set(scores["reason"]) == {"no_paper_text"} and scores["score"].is_nan().all()


def test_the_paper_text_review_quality_reads_leaves_out_related_work(tmp_path, monkeypatch):
    """Beyond Rating (paper 003, section 3) reads the paper without its Related Work section."""
    from tasks.core.layout import stage_dir
    from tasks.metrics.quality import load_facts
    from tests.submit_data import VENUE, scoring_config

    monkeypatch.setenv("ANTHROPIC_API_KEY", "fake-test-key-quality")
    cfg = scoring_config(tmp_path)
    papers = pl.read_parquet(stage_dir(cfg, "t", "curate", VENUE) / "papers.parquet")["paper_id"].to_list()
    pl.DataFrame({"paper_id": papers, "text": ["body with related work"] * len(papers),
                  "text_no_related_work": ["body only"] * (len(papers) - 1) + [None]}).write_parquet(
        stage_dir(cfg, "t", "ingest", VENUE) / "pdf_texts.parquet")
    texts = dict(load_facts(cfg, "t").papers.select("paper_id", "text").iter_rows())
    assert [texts[p] for p in papers] == ["body only"] * (len(papers) - 1) + ["body with related work"]


def test_ai_rate_counts_the_reviews_below_the_binoculars_threshold(monkeypatch):
    """Beyond Rating's AI rate (section 4.6): a review whose Binoculars score is below 0.9015 counts as
    AI-written; per review 1 or 0, so a model's mean over its reviews is its AI rate; NaN stays NaN."""
    from tasks.metrics.review_quality import binoculars

    refs, cands, facts, syn = inputs()
    scores = dict(zip(cands["candidate"], [0.80, 0.95, math.nan, 0.90, 1.10, 0.85, 0.70], strict=True))
    monkeypatch.setattr(binoculars, "review_scores", lambda pair, items: {
        (c, "binoculars"): (scores[c], "tokenizers_differ" if math.isnan(scores[c]) else None) for c, _ in items})
    work = QualityWork(QualitySettings(binoculars=("observer", "performer")), facts, llm=None)
    got = work.evaluate(["ai_rate", "binoculars"], cands, refs, syn, embed=None)
    rates = {c: got[(c, "ai_rate")] for c in cands["candidate"]}
    assert [rates[c][0] for c in cands["candidate"] if not math.isnan(scores[c])] == [
        1.0 if scores[c] < 0.9015 else 0.0 for c in cands["candidate"] if not math.isnan(scores[c])]
    nan_candidate = next(c for c in cands["candidate"] if math.isnan(scores[c]))
    assert math.isnan(rates[nan_candidate][0]) and rates[nan_candidate][1] == "tokenizers_differ"
    assert got[(nan_candidate, "binoculars")][1] == "tokenizers_differ"


def test_every_pair_is_judged_and_a_top_1_prefilter_misses_a_match(tmp_path, monkeypatch) -> None:
    """M(a, h) over all pairs (Beyond Rating eq. 2-3). The human point the embedding ranks first shares the
    candidate's words but not its point; the one it ranks second makes the same point in other words. All pairs:
    the match is found. A top-1 prefilter never asks that pair and counts it unmatched: a lower bound."""
    from tasks.metrics.review_quality.matching import match_points

    def same_point(params: dict) -> str:
        a, h = re.findall(r"<point_[ab]>\n(.*?)\n</point_[ab]>", user_text(params), re.DOTALL)
        return "Yes" if ("ablation" in a) == ("ablation" in h or "removing each part" in h) else "No"

    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    cand = pl.DataFrame([{"review_id": "c", "paper_id": "p", "field": "weaknesses", "position": 0,
                          "text": "The paper lacks an ablation of the loss terms in the experiments."}])
    human = pl.DataFrame([
        {"review_id": "h", "paper_id": "p", "field": "weaknesses", "position": 0,
         "text": "The experiments of the paper use the loss terms of prior work."},
        {"review_id": "h", "paper_id": "p", "field": "weaknesses", "position": 1,
         "text": "Nobody checked what removing each part of the objective does."}])
    points = ["review_id", "paper_id", "field", "position", "text"]
    cfg = LLMConfig(backend="anthropic", model="claude-test", use_batches=False, max_retries=0)
    with AnthropicServer(same_point) as server:
        llm = make_lm(cfg, tmp_path, base_url=server.url)
        every = match_points(cand.select(points), human.select(points), [("c", "h")], bag_of_words, llm, "match?")
        top1 = match_points(cand.select(points), human.select(points), [("c", "h")], bag_of_words, llm, "match?", 1)
    sims = every.matches.sort("h_position")["similarity"].to_list()
    assert sims[0] > sims[1]                                   # the prefilter's one pick is the wrong point
    assert every.matches.sort("h_position")["match"].to_list() == [0, 1] and every.matches["asked"].all()
    assert top1.matches.sort("h_position")["match"].to_list() == [0, 0]       # the match it never asked about
    assert top1.matches.sort("h_position")["asked"].to_list() == [True, False]


def test_a_stated_rating_and_a_read_out_one_are_scored_apart() -> None:
    """rating_mae reads ratings a review states, rating_mae_readout ratings read from the model at the rating
    position (an expectation): one number never mixes the two, and each says where the other kind went."""
    refs = pl.DataFrame([{"paper_id": "p0", "review_id": "r0", "review_text": "A review."},
                         {"paper_id": "p0", "review_id": "r1", "review_text": "Another review."}], schema=REFERENCES)
    generated = pl.DataFrame([{"paper_id": "p0", "candidate": f"{m}/p0", "source": m, "review_id": None,
                               "review_text": "A generated review."} for m in ("said", "read")],
                             schema=SCORING_CANDIDATES)
    cands = pl.concat([human_candidates(refs).cast(dict(SCORING_CANDIDATES)), generated])
    facts = ReviewFacts(pl.DataFrame([
        {"review_id": "r0", "paper_id": "p0", "rating": 3.0, "rating_method": "stated"},
        {"review_id": "r1", "paper_id": "p0", "rating": 5.0, "rating_method": "stated"},
        {"review_id": "said/p0", "paper_id": "p0", "rating": 6.0, "rating_method": "stated"},
        {"review_id": "read/p0", "paper_id": "p0", "rating": 5.4, "rating_method": "readout:local/smollm2"}],
        schema=REVIEW_FACTS), pl.DataFrame([{"paper_id": "p0", "decision": "Reject"}], schema=PAPER_FACTS))
    work = QualityWork(QualitySettings(), facts, None)
    scores = score_metrics(["rating_mae", "rating_mae_readout", "accept_accuracy", "accept_accuracy_readout"], cands,
                           refs, pl.DataFrame(schema=SYNOPSES_WIDE), Resources("lm", quality=work))
    got = {(c, m): (s, r) for c, m, s, r in scores.select("candidate", "metric", "score", "reason").iter_rows()}
    assert got[("said/p0", "rating_mae")] == (pytest.approx(2.0), None)
    assert math.isnan(got[("said/p0", "rating_mae_readout")][0])
    assert got[("said/p0", "rating_mae_readout")][1] == "rating_stated: see rating_mae"
    assert got[("read/p0", "rating_mae_readout")] == (pytest.approx(1.4), None)
    assert got[("read/p0", "rating_mae")][1] == "rating_readout: see rating_mae_readout"
    assert got[("r0", "rating_mae")] == (pytest.approx(2.0), None)       # a human's rating is stated
    # the accept side the same way apart: 6 says accept on a rejected paper, 5.4 says reject
    assert got[("said/p0", "accept_accuracy")] == (0.0, None)
    assert got[("said/p0", "accept_accuracy_readout")][1] == "rating_stated: see accept_accuracy"
    assert got[("read/p0", "accept_accuracy_readout")] == (1.0, None)
    assert got[("read/p0", "accept_accuracy")][1] == "rating_readout: see accept_accuracy_readout"
