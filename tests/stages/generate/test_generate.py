"""Candidate generation and the contamination guard: parsing, cutting at a section, the guard on
either side of a cutoff, the Anthropic path (Messages and Batches) through the local server with
the real SDK, SmolLM2 on CPU, caching and rejects, and the stage flow end to end."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from pathlib import Path

import polars as pl
import pytest

from tasks.core.config import CandidateConfig, ConfigError, GenerateConfig
from tasks.core.paper_fit import estimate_counter, fit_text, is_heading, section_starts
from tasks.core.schema import CURATED_PAPERS, CURATED_REVIEWS, EXCLUSIONS, GENERATED, conform
from tasks.lm import TransientLLMError, make_lm
from tasks.stages.generate.contamination import guard
from tasks.stages.generate.reviews import REMINDER, generate_reviews, make_meter, parse_review
from tasks.testing.anthropic_server import AnthropicServer, heuristic_responder, system_text, user_text
from tests.submit_data import JUDGE_CONFIG

KEY = "fake-test-key-generate-0a1b2c3d"
SECTIONS = ["Introduction", "Related Work", "Method", "Experiments", "Conclusion"]


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)


def paper_body(title: str, sentences_per_section: int = 6, marker: str = "") -> str:
    """A paper's PDF text: title, abstract, numbered sections, one paragraph per line."""
    lines = [title, "Abstract", f"We study {title.lower()} and propose a simple method. {marker}".strip()]
    for number, name in enumerate(SECTIONS, 1):
        lines.append(f"{number} {name}")
        lines.append(" ".join(f"The {name.lower()} part states finding {k} about {title.lower()} clearly."
                              for k in range(sentences_per_section)))
    return "\n".join(lines)


def tagged_review(params: dict) -> str:
    """The server's stand-in reviewer: a tagged review built from the paper's sentences."""
    if "<summary>" not in system_text(params):
        return heuristic_responder(params)
    user = user_text(params)
    if "UNREVIEWABLE" in user:
        return "I am sorry, I cannot review this."
    paper = re.search(r"<paper>\s*(.*?)\s*</paper>", user, re.S).group(1)
    sentences = [s for s in re.split(r"(?<=\.)\s+", paper) if len(s.split()) > 4]
    points = "\n".join(f"{k}. The paper shows that {s[0].lower()}{s[1:]}\n   - It is argued in the text." for k, s
                       in enumerate(sentences[:4], 1))
    return (f"<summary>\nThe paper proposes a method; {sentences[0]}\n</summary>\n<strengths>\n{points}\n</strengths>\n"
            f"<weaknesses>\n{points.replace('shows', 'fails to show')}\n</weaknesses>\n"
            "<questions>\nHow does the method scale to larger data?\n</questions>")


def papers_frame(dates: list[datetime | None], created: list[datetime | None] | None = None) -> pl.DataFrame:
    n = len(dates)
    return pl.DataFrame({
        "paper_id": [f"P{k}" for k in range(n)], "venue_id": ["Test.cc/2024/Conference"] * n,
        "title": [f"Sparse Topic {k}" for k in range(n)], "abstract": [f"An abstract about topic {k}." for k in range(n)],
        "first_public_at": dates, "created_at": created or [None] * n, "in_benchmark": [True] * n,
    }, schema_overrides={"first_public_at": pl.Datetime("ms", "UTC"), "created_at": pl.Datetime("ms", "UTC")})


def two_papers(first_public: datetime) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(papers P0 and P1, first public on that date; their texts of 12 sentences a section) for a small model."""
    texts = pl.DataFrame({"paper_id": ["P0", "P1"], "text": [paper_body("Graph Networks", 12),
                                                              paper_body("Sparse Coding", 12)]})
    return papers_frame([first_public] * 2), texts


def anthropic_candidate(**overrides) -> CandidateConfig:
    settings = {"name": "claude-test", "backend": "anthropic", "model": "claude-test", "knowledge_cutoff": "2023-12-31",
                "max_tokens": 600, "max_context_tokens": 4000, "use_batches": False, "poll_seconds": 0.01,
                "max_retries": 0, "input_price_per_mtok": 3.0, "output_price_per_mtok": 15.0, **overrides}
    return CandidateConfig(**settings)


# ---- parsing ------------------------------------------------------------------------------------
def test_parse_review_tags_unclosed_tags_headings_and_garbage():
    parsed = parse_review("<summary>\nA new optimiser for sparse data.\n</summary>\n<strengths>\n1. Clear proofs"
                          " of convergence.\n</strengths>\n<weaknesses>\n1. Only two small data sets.\n"
                          "<questions>\nDoes it scale to large models?")
    assert list(parsed.sections) == ["summary", "strengths", "weaknesses", "questions"]
    assert parsed.render().startswith("## Summary\n\nA new optimiser for sparse data.\n\n## Strengths\n\n1. Clear")
    assert "## Weaknesses\n\n1. Only two small data sets." in parsed.render()   # unclosed tag kept
    assert parse_review("## Strengths\nThe method is simple and fast.\n**Weaknesses:**\nNo ablation at all."
                        ).sections == {"strengths": "The method is simple and fast.", "weaknesses": "No ablation at all."}
    assert not parse_review("I cannot review this paper.").usable
    assert not parse_review("<summary>ok</summary><strengths></strengths>").usable   # too short, empty
    assert not parse_review("<summary>\n1.\n2.\n3.\n<strong>\n<small>\n<small>\n</summary>").usable  # markup only
    assert parse_review("<summary><p>A <b>fast</b> sparse solver.</p>").sections == {"summary": "A fast sparse solver."}


# ---- cutting at a section boundary --------------------------------------------------------------
def test_headings_and_cut_at_section_boundary():
    text = paper_body("Sparse Attention")
    assert is_heading("3 Method") and is_heading("4.2 Ablations") and is_heading("Introduction")
    assert not is_heading("3 benchmarks were used in all runs.") and not is_heading("")
    starts = section_starts(text)
    assert [text[i:].split("\n", 1)[0] for i in starts] == ["Abstract"] + [f"{k} {s}" for k, s in enumerate(SECTIONS, 1)]
    count = estimate_counter(4.0)
    whole = count(text)
    fit = fit_text(text, whole // 2, count)
    assert fit.truncated and fit.cut == "section" and fit.tokens <= whole // 2
    assert text.startswith(fit.text) and fit.kept_chars == len(fit.text)
    following = text[len(fit.text):].lstrip("\n").split("\n", 1)[0]
    assert is_heading(following)                    # the next line of the full text is a heading
    assert fit_text(text, whole, count).truncated is False
    # A first section longer than the budget: cut at a paragraph, then at a word
    lone = "Title\n" + "word " * 400 + "\nSecond paragraph " * 3
    assert fit_text(lone, 5, count).cut == "paragraph"
    assert fit_text("word " * 400, 20, count).cut == "word"
    assert fit_text(text, 0, count) is None


# ---- the contamination guard --------------------------------------------------------------------
def test_guard_on_either_side_of_the_cutoff_and_on_it():
    cutoff = date(2024, 3, 15)
    papers = papers_frame(
        [datetime(2024, 3, 14, 23, 59, tzinfo=UTC), datetime(2024, 3, 15, 0, 0, tzinfo=UTC),
         datetime(2024, 3, 15, 23, 59, tzinfo=UTC), datetime(2024, 3, 16, 0, 0, tzinfo=UTC), None, None],
        created=[None, None, None, None, datetime(2024, 3, 20, tzinfo=UTC), None],
    )
    kept, excluded = guard(papers, "m", cutoff)
    assert kept["paper_id"].to_list() == ["P3", "P4"]           # the day after; created_at fallback after
    assert excluded.schema == EXCLUSIONS
    assert excluded.select("paper_id", "reason", "date_source").rows() == [
        ("P0", "public_on_or_before_cutoff", "first_public_at"),
        ("P1", "public_on_or_before_cutoff", "first_public_at"),
        ("P2", "public_on_or_before_cutoff", "first_public_at"),
        ("P5", "no_public_date", "none"),
    ]
    assert set(excluded["knowledge_cutoff"]) == {cutoff} and set(excluded["model"]) == {"m"}
    assert kept.height + excluded.height == papers.height


def test_candidate_config_validation():
    with pytest.raises(ValueError, match="max_tokens must be smaller"):
        anthropic_candidate(max_tokens=5000)
    with pytest.raises(ValueError, match="unique"):
        GenerateConfig(candidates=(anthropic_candidate(), anthropic_candidate()))
    with pytest.raises(ValueError):
        anthropic_candidate(name="bad/name")


# ---- the Anthropic path through the local server ------------------------------------------------
@pytest.mark.parametrize("batches", [False, True])
def test_anthropic_generation_caches_and_counts(tmp_path, batches):
    papers = papers_frame([datetime(2024, 5, 1, tzinfo=UTC)] * 3)
    texts = pl.DataFrame({"paper_id": ["P0", "P1"], "text": [paper_body("Sparse Topic 0"),
                                                              paper_body("Sparse Topic 1", 60)]})
    candidate = anthropic_candidate(use_batches=batches, max_context_tokens=2000)
    with AnthropicServer(tagged_review) as server:
        backend = make_lm(candidate, tmp_path, base_url=server.url)
        out = generate_reviews(papers, texts, candidate, backend, chars_per_token=4.0)
        calls = dict(server.counts)
        assert calls.get("batches_create", 0) == (1 if batches else 0)
        assert calls.get("messages", 0) == (0 if batches else 3)
        frame = out.candidates
        assert frame.schema == GENERATED and frame.height == 3 and out.rejects.is_empty()
        by_id = {row["paper_id"]: row for row in frame.iter_rows(named=True)}
        assert by_id["P0"]["text_source"] == "pdf_text" and not by_id["P0"]["truncated"]
        assert by_id["P1"]["truncated"] and by_id["P1"]["cut"] == "section"       # 60 sentences per section
        assert by_id["P1"]["kept_chars"] < by_id["P1"]["paper_chars"]
        assert by_id["P2"]["text_source"] == "abstract"
        for row in frame.iter_rows(named=True):
            assert row["candidate_id"] == f"claude-test/{row['paper_id']}" and row["model"] == "claude-test"
            assert [h for h in re.findall(r"^## (\w+)", row["review"], re.M)] == [
                "Summary", "Strengths", "Weaknesses", "Questions"]
            assert row["tokens"] == row["input_tokens"] + row["output_tokens"] > 0 and row["cost"] > 0
        sent = [body for body in server.received]
        users = [r["params"]["messages"][0]["content"] for b in sent for r in b["requests"]] if batches else \
            [b["messages"][0]["content"] for b in sent]
        cut = next(u for u in users if "Sparse Topic 1" in u)
        assert "the paper was cut to fit" in cut and len(cut) / 4.0 < 2000 - 600
        usage = out.usage.row(0, named=True)
        assert usage["purpose"] == "generate:claude-test" and usage["requests"] == 3 and usage["cached"] == 0
        assert usage["cost_usd"] == pytest.approx(frame["cost"].sum())
        # A second run makes no LLM call and gives the same reviews
        again = generate_reviews(papers, texts, candidate, make_lm(candidate, tmp_path, base_url=server.url))
        assert dict(server.counts) == calls
        assert again.candidates.equals(frame)
        assert again.usage["cached"][0] == 3 and again.usage["cost_usd"][0] == 0


def test_unusable_answer_is_retried_once_then_rejected(tmp_path):
    papers = papers_frame([datetime(2024, 5, 1, tzinfo=UTC)] * 2)
    texts = pl.DataFrame({"paper_id": ["P0", "P1"], "text": [paper_body("Good Topic"),
                                                              paper_body("Bad Topic", marker="UNREVIEWABLE")]})
    candidate = anthropic_candidate()
    with AnthropicServer(tagged_review) as server:
        out = generate_reviews(papers, texts, candidate, make_lm(candidate, tmp_path, base_url=server.url))
        assert server.counts["messages"] == 3                      # two papers + one retry
        retry = server.received[-1]["messages"][0]["content"]
        assert "UNREVIEWABLE" in retry and retry.endswith(REMINDER)
        assert out.candidates["paper_id"].to_list() == ["P0"]
        assert out.rejects.select("stage", "entity", "entity_id", "rule").rows() == [
            ("generate", "candidate_review", "claude-test/P1", "unusable_answer")]
        assert out.stats == {"papers": 2, "reviews": 1, "rejected": 1, "retried": 1, "truncated": 0}
        generate_reviews(papers, texts, candidate, make_lm(candidate, tmp_path, base_url=server.url))
        assert server.counts["messages"] == 3                      # the rejected answers are cached too


def test_transient_failure_raises_for_the_task_retry_and_nothing_is_lost(tmp_path):
    papers = papers_frame([datetime(2024, 5, 1, tzinfo=UTC)] * 2)
    candidate = anthropic_candidate()
    with AnthropicServer(tagged_review) as server:
        server.fail_next(529)
        with pytest.raises(TransientLLMError, match="transiently"):
            generate_reviews(papers, None, candidate, make_lm(candidate, tmp_path, base_url=server.url))
        first = server.counts["messages"]
        out = generate_reviews(papers, None, candidate, make_lm(candidate, tmp_path, base_url=server.url))
        assert out.candidates.height == 2
        assert server.counts["messages"] == first + 1               # only the failed paper is asked again


def test_context_too_small_and_missing_text_are_rejected(tmp_path):
    papers = papers_frame([datetime(2024, 5, 1, tzinfo=UTC)] * 2).with_columns(
        abstract=pl.Series([None, "A long enough abstract about the method."]))
    candidate = anthropic_candidate(max_tokens=200, max_context_tokens=256)
    with AnthropicServer(tagged_review) as server:
        out = generate_reviews(papers, None, candidate, make_lm(candidate, tmp_path, base_url=server.url))
        assert server.counts["messages"] == 0
    assert sorted(out.rejects["rule"]) == ["context_too_small", "no_paper_text"]


# ---- the embedded SmolLM2 on CPU ----------------------------------------------------------------
@pytest.mark.slow
def test_smollm2_writes_short_reviews_within_its_context(tmp_path, embedded_lm):
    papers, texts = two_papers(datetime(2024, 5, 1, tzinfo=UTC))
    candidate = CandidateConfig(name="smollm2-brief", backend="local", model="smollm2", knowledge_cutoff="2024-01-01",
                                max_tokens=16, max_context_tokens=600, prompt_version="review-brief-v1", batch_size=2)
    backend = make_lm(candidate, tmp_path)
    out = generate_reviews(papers, texts, candidate, backend)
    assert out.candidates.height + out.rejects.height == 2
    assert out.candidates.height >= 1                    # the answer is started with <summary> for it
    meter = make_meter(candidate, 3.5)
    for row in out.candidates.iter_rows(named=True):
        assert row["review"].startswith("## Summary\n\n") and row["truncated"] and row["cut"] == "section"
        assert row["input_tokens"] + candidate.max_tokens <= candidate.max_context_tokens
        assert row["output_tokens"] <= candidate.max_tokens and row["cost"] == 0
        assert meter.count(row["review"]) > 0
        # its rating, read from its own probabilities after its review: on the common scale's range
        assert row["rating_method"] == "readout:local/smollm2" and 1.0 <= row["rating"] <= 10.0
    generated = backend.inner.generated_tokens
    again = generate_reviews(papers, texts, candidate, make_lm(candidate, tmp_path))
    assert again.candidates.equals(out.candidates)
    assert again.usage["cached"][0] == again.usage["requests"][0] > 0
    assert backend.inner.generated_tokens == generated


# ---- the stage flow -----------------------------------------------------------------------------
CONFIG = JUDGE_CONFIG + """
[generate]
chars_per_token = 4.0

{candidates}
[pipelines.t]
venues = ["Test.cc/2024/Conference"]
stages = ["generate", "materialize"]
"""
# (name, model, knowledge cutoff, Batches API): one candidate through each Anthropic path
CANDIDATES = [("early-model", "claude-early", "2024-02-01", "true"), ("late-model", "claude-late", "2024-03-15", "false")]
CANDIDATE = """
[[generate.candidates]]
name = "{}"
backend = "anthropic"
model = "{}"
knowledge_cutoff = {}
max_tokens = 600
max_context_tokens = 3000
use_batches = {}
poll_seconds = 0.01
"""


def write_curated(root: Path) -> None:
    from tasks.core.config import load_config
    from tasks.core.layout import stage_dir

    cfg = load_config(root / "pipelines.toml").for_pipeline("t")
    venue = "Test.cc/2024/Conference"
    dates = [datetime(2024, 2, 1, tzinfo=UTC), datetime(2024, 3, 15, 12, tzinfo=UTC),
             datetime(2024, 4, 1, tzinfo=UTC), None, datetime(2024, 4, 2, tzinfo=UTC)]
    papers = papers_frame(dates, created=[None, None, None, datetime(2024, 5, 1, tzinfo=UTC), None]).with_columns(
        in_benchmark=pl.Series([True, True, True, True, False]))
    conform(papers, CURATED_PAPERS).write_parquet(stage_dir(cfg, "t", "curate", venue) / "papers.parquet")
    reviews = pl.DataFrame({"review_id": [f"R{k}" for k in range(5)], "paper_id": [f"P{k}" for k in range(5)],
                            "venue_id": [venue] * 5, "rating": [6.0] * 5, "confidence": [4.0] * 5,
                            "review_text": ["The method is clear. The evaluation lacks baselines."] * 5})
    conform(reviews, CURATED_REVIEWS).write_parquet(stage_dir(cfg, "t", "curate", venue) / "reviews.parquet")
    texts = pl.DataFrame({"paper_id": ["P0", "P1", "P2"], "text": [paper_body(f"Sparse Topic {k}") for k in range(3)]})
    texts.write_parquet(stage_dir(cfg, "t", "ingest", venue) / "pdf_texts.parquet")


@pytest.mark.slow
def test_generate_flow_writes_outputs_preprocesses_and_reruns_without_calls(prefect_harness, tmp_path, monkeypatch):
    from flows.generate import generate_flow
    from tasks.core.config import load_config
    from tasks.core.frames import scoring_candidates
    from tasks.stages.materialize.build import build_database

    candidates = "".join(CANDIDATE.format(*c) for c in CANDIDATES)
    (tmp_path / "pipelines.toml").write_text(CONFIG.format(candidates=candidates))
    write_curated(tmp_path)
    cfg = load_config(tmp_path / "pipelines.toml").for_pipeline("t")
    with AnthropicServer(tagged_review) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        first = generate_flow(cfg, "t")
        calls = sum(server.counts.values())
        second = generate_flow(cfg, "t")
        assert sum(server.counts.values()) == calls
    assert first.llm_calls > 0 and second.llm_calls == 0 and second.cost_usd == 0
    assert first.input_tokens > 0 and first.output_tokens > 0 and first.cost_usd > 0
    assert first.details["benchmark_papers"] == 4 and first.rows_in == 8     # 4 papers x 2 candidates
    per_model = first.details["per_model"]
    assert per_model["early-model"]["reviews"] == 3 and per_model["early-model"]["excluded"] == 1
    assert per_model["late-model"]["reviews"] == 2 and per_model["late-model"]["excluded"] == 2
    assert second.details["per_model"] == per_model and second.rows_out == first.rows_out == 5
    folder = cfg.data_dir / "t" / "generate"
    candidates = pl.read_parquet(folder / "candidates.parquet")
    exclusions = pl.read_parquet(folder / "exclusions.parquet")
    assert sorted(exclusions.select("model", "paper_id").rows()) == [
        ("early-model", "P0"), ("late-model", "P0"), ("late-model", "P1")]
    assert candidates.join(exclusions, on=["model", "paper_id"]).is_empty()
    judgments = pl.read_parquet(folder / "candidate_judgments.parquet")
    assert set(judgments["review_id"]) == set(candidates["candidate_id"])
    usage = pl.read_parquet(folder / "usage.parquet")
    assert usage["purpose"].to_list() == ["generate:early-model", "generate:late-model", "candidate_judgments"]
    scoring = scoring_candidates(cfg, "t")
    assert scoring.height == 5 and scoring["judgments"].null_count() == 0 and scoring["review_id"].null_count() == 5
    built = build_database(cfg, "t")
    assert built.tables["candidates"] == 5 and built.tables["exclusions"] == 3
    import duckdb

    with duckdb.connect(str(cfg.database), read_only=True) as con:
        coverage = con.execute("SELECT model, benchmark_papers, reviewed, excluded, rejected FROM candidate_coverage"
                               ).fetchall()
    assert coverage == [("early-model", 4, 3, 1, 0), ("late-model", 4, 2, 2, 0)]


def test_generate_needs_candidates(tmp_path):
    from tasks.core.config import load_config
    from tasks.stages.generate.reviews import read_generate_inputs

    (tmp_path / "pipelines.toml").write_text(
        '[pipelines.t]\nvenues = ["Test.cc/2024/Conference"]\nstages = ["generate"]\n')
    with pytest.raises(ConfigError, match="no candidate models"):
        read_generate_inputs(load_config(tmp_path / "pipelines.toml").for_pipeline("t"), "t")


# ---- the OpenAI-compatible path, with the embedded SmolLM2 behind the local server (the demo's) ----
@pytest.mark.slow
def test_a_served_model_writes_reviews_through_the_openai_path(tmp_path, embedded_lm):
    papers, texts = two_papers(datetime(2024, 9, 1, tzinfo=UTC))
    candidate = CandidateConfig(name="smollm2-openai", backend="openai", model="smollm2", base_url="served:smollm2",
                                api_key_env="", continue_final_message=True, use_batches=True, poll_seconds=0.05,
                                knowledge_cutoff="2024-06-30", max_tokens=24, max_context_tokens=600,
                                prompt_version="review-brief-v1", input_price_per_mtok=0, output_price_per_mtok=0)
    out = generate_reviews(papers, texts, candidate, make_lm(candidate, tmp_path))
    assert out.candidates.height >= 1 and out.candidates.height + out.rejects.height == 2
    for row in out.candidates.iter_rows(named=True):
        assert row["backend"] == "openai" and row["review"].startswith("## Summary\n\n") and row["cost"] == 0
        # no log-likelihoods through the chat API, but its top_logprobs after the <rating> tag
        assert row["rating_method"] == "toplogprobs:openai/smollm2" and row["rating"] is not None
    reviews_asked = out.stats["papers"] + out.stats["retried"]
    assert out.usage["requests"][0] == reviews_asked + out.candidates.height   # reviews, then one row per rating read
    again = generate_reviews(papers, texts, candidate, make_lm(candidate, tmp_path))
    assert again.candidates.equals(out.candidates)
    assert again.usage["cached"][0] == again.usage["requests"][0] > 0


OPENAI_CANDIDATE = """
[[generate.candidates]]
name = "gpt-test"
backend = "openai"
base_url = "{base_url}"
api_key_env = "GREBENCH_TEST_OPENAI_KEY"
model = "gpt-test"
knowledge_cutoff = 2024-02-01
max_tokens = 600
max_context_tokens = 3000
use_batches = {batches}
poll_seconds = 0.01
"""


def openai_tagged_review(body: dict) -> str:
    """`tagged_review` for an OpenAI request body (the system prompt is the first message)."""
    messages = body["messages"]
    return tagged_review({"system": messages[0]["content"], "messages": messages[1:]})


@pytest.mark.slow
@pytest.mark.parametrize("batches", ["true", "false"])
def test_an_openai_candidate_added_in_config_gets_its_rows(prefect_harness, tmp_path, monkeypatch, batches):
    """The issue's "done when": a [[generate.candidates]] entry with backend = "openai" and a base URL."""
    from flows.generate import generate_flow
    from tasks.core.config import load_config
    from tasks.stages.materialize.build import build_database
    from tasks.testing.openai_server import OpenAIServer

    monkeypatch.setenv("GREBENCH_TEST_OPENAI_KEY", "sk-test-generate")
    with OpenAIServer(openai_tagged_review) as openai_server, AnthropicServer(tagged_review) as server:
        candidate = OPENAI_CANDIDATE.format(base_url=openai_server.base_url, batches=batches)
        (tmp_path / "pipelines.toml").write_text(CONFIG.format(candidates=candidate))
        write_curated(tmp_path)
        cfg = load_config(tmp_path / "pipelines.toml").for_pipeline("t")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        first = generate_flow(cfg, "t")
        calls = sum(openai_server.counts.values())
        second = generate_flow(cfg, "t")
        assert sum(openai_server.counts.values()) == calls > 0
        assert openai_server.counts["batches_create" if batches == "true" else "chat"] > 0
    assert first.details["per_model"]["gpt-test"]["reviews"] == 3 and second.llm_calls == 0
    candidates = pl.read_parquet(cfg.data_dir / "t" / "generate" / "candidates.parquet")
    assert set(candidates["backend"]) == {"openai"} and set(candidates["model_id"]) == {"gpt-test"}
    build_database(cfg, "t")
    import duckdb

    with duckdb.connect(str(cfg.database), read_only=True) as con:
        coverage = con.execute("SELECT model, reviewed, excluded FROM candidate_coverage").fetchall()
    assert coverage == [("gpt-test", 3, 1)]


def test_the_rating_position_is_after_the_rating_tag_or_after_the_review():
    from tasks.stages.generate.ratings import rating_position

    assert rating_position("<rating>\n8\n</rating>\n<summary>\nA.\n</summary>") == "<rating>\n"
    assert rating_position("<summary>\nA.\n</summary>\n<rating>\n8") == "<summary>\nA.\n</summary>\n<rating>\n"
    assert rating_position("<summary>\nA.\n</summary>\n") == "<summary>\nA.\n</summary>\n<rating>\n"


@pytest.mark.slow
def test_candidates_run_at_most_so_many_at_once_and_come_back_in_order(prefect_harness):
    """`submit_at_most`: a sliding window of Prefect task runs (the next starts when any finishes)."""
    import threading

    from prefect import flow, task

    from tasks.stages.generate.steps import submit_at_most

    lock, state = threading.Lock(), {"now": 0, "most": 0}
    others_done = threading.Event()

    @task
    def review(name: str, waits: bool) -> str:
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        if waits:   # the long one holds its slot until the short ones are through the other slot
            state["overtaken"] = others_done.wait(timeout=60)
        elif name == "fourth":
            others_done.set()
        with lock:
            state["now"] -= 1
        return name

    @flow
    def reviews(limit: int, long_waits: bool) -> list[str]:
        items = [("long", long_waits), ("short", False), ("third", False), ("fourth", False)]
        return [f.result() for f in submit_at_most(limit, lambda item: review.submit(*item), items)]

    names = reviews(2, True)
    assert names == ["long", "short", "third", "fourth"] and state["most"] == 2
    assert state["overtaken"]   # the short ones ran beside the long one, not after it
    state["most"] = 0
    assert reviews(1, False) == ["long", "short", "third", "fourth"] and state["most"] == 1
