"""GEM's LM-examiner (`lm_examiner`, tasks/metrics/judge.py) through the real `anthropic` client and the
local Anthropic-compatible server: the examiner reads the paper's text (cut at a section boundary to the
judge's context) and the candidate's judgments, is asked for an analysis of the four criteria, and its
score is read after the analysis. The API backend gives no token probabilities, so the rating is the
generated and parsed one, and the column says so."""

from __future__ import annotations

import math

import polars as pl

from tasks.core.config import LLMConfig
from tasks.core.schema import REFERENCES, SCORING_CANDIDATES, SYNOPSES_WIDE
from tasks.lm.lazy import LazyLM
from tasks.metrics.judge import judge_family
from tasks.metrics.registry import REGISTRY, Resources
from tasks.testing.anthropic_server import AnthropicServer, system_text, user_text

INTRO = "1 Introduction\n" + "We study sparse attention for long documents. " * 20
METHOD = "2 Method\n" + "The router picks blocks by a learned score. " * 20
RESULTS = "3 Results\n" + "On three benchmarks the model is faster and as accurate. " * 400   # far beyond the context
PAPER = f"{INTRO}\n{METHOD}\n{RESULTS}"


def examiner(params: dict) -> str:
    return ("Understanding: the review gets the router right. Coverage: it skips the results. "
            "Substantiation: it cites section 2. Constructiveness: it asks for an ablation.\n"
            "Overall: useful but partial.\n</analysis>\nScore: 6")


def test_the_examiner_reads_the_paper_and_the_four_criteria(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    cands = pl.DataFrame([
        {"paper_id": "p", "candidate": "c", "source": "m", "review_id": None, "review_text": "raw text",
         "judgments": "The reviewer criticizes that the router is not ablated."},
        {"paper_id": "q", "candidate": "d", "source": "m", "review_id": None, "review_text": "raw text",
         "judgments": "The reviewer appreciates the clear writing."}], schema=SCORING_CANDIDATES)
    syn = pl.DataFrame([{"paper_id": "p", "abstract": "Sparse attention.", "paper_text": PAPER},
                        {"paper_id": "q", "abstract": "No PDF here."}], schema=SYNOPSES_WIDE)
    with AnthropicServer(examiner) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        judge = LazyLM(LLMConfig(backend="anthropic", model="examiner", use_batches=False, max_retries=0), tmp_path)
        rows = judge_family([REGISTRY["lm_examiner"]], cands, pl.DataFrame(schema=REFERENCES), None, syn,
                            Resources(llm=judge, judge_context_tokens=2048)).scores
        (asked,) = server.received
    got = {r["candidate"]: r for r in rows.iter_rows(named=True)}
    assert got["c"]["score"] == 6.0 and got["c"]["reference"] is None
    assert got["c"]["eval_lm"] == "generate:anthropic/examiner"        # an API judge: generated and parsed
    assert math.isnan(got["d"]["score"]) and got["d"]["reason"] == "no_paper_text"
    system, user = system_text(asked), user_text(asked)
    for criterion in ("Understanding", "Coverage", "Substantiation", "Constructiveness"):
        assert criterion in system
    assert "analysis" in system and "Score: N" in system
    assert "router is not ablated" in user                              # the candidate's judgments
    assert "2 Method" in user and "3 Results" not in user               # cut before the section that overflows
    assert "The router picks blocks by a learned score." in user
    last = asked["messages"][-1]                                         # the analysis is asked for first
    assert last["role"] == "assistant" and "<analysis>" in str(last["content"])
    assert REGISTRY["lm_examiner"].conditioned_on == "paper" and REGISTRY["lm_examiner"].reads == "judgments"
    for name in ("llm_judge", "llm_judge_noref", "lm_examiner"):     # each description says what it reads
        assert "reads" in REGISTRY[name].description
