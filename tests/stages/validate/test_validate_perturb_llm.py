"""A perturbation LLM apart from the preprocessing one, and a second rephraser."""

from __future__ import annotations

from typing import Any

import pytest

from tasks.core.config import LLMConfig, ValidateConfig, load_config
from tasks.lm.anthropic_api import AnthropicLM
from tasks.metrics import Resources
from tasks.stages.validate.workflow import run_validation
from tasks.testing.anthropic_server import AnthropicServer, user_text
from tests.stages.validate.test_validate_workflow import make_reviews

CFG = LLMConfig(backend="anthropic", model="claude-test", use_batches=False, max_retries=0, max_in_flight=1)


def test_config_reads_the_perturbation_llms(tmp_path):
    path = tmp_path / "pipelines.toml"
    path.write_text('[validate]\nstrategies = ["rephrase", "rephrase_second"]\nlevel = "raw"\n\n'
                    '[validate.perturb_llm]\nbackend = "anthropic"\nmodel = "rewriter"\n\n'
                    '[validate.rephrase_llm]\nbackend = "local"\nmodel = "smollm2"\n')
    v = load_config(path).validate
    assert v.perturb_llm.model == "rewriter" and v.rephrase_llm.backend == "local" and v.level == ("raw",)
    path.write_text('[validate]\nstrategies = ["rephrase_second"]\n')
    with pytest.raises(Exception, match="rephrase_llm"):
        load_config(path)


def test_each_rephraser_rewrites_with_its_own_model(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")

    def responder(params: dict[str, Any]) -> str:
        return f"[{params['model']}] {user_text(params)}"

    with AnthropicServer(responder) as server:
        first = AnthropicLM(CFG.model_copy(update={"model": "first"}), base_url=server.url, sleep=lambda _: None)
        second = AnthropicLM(CFG.model_copy(update={"model": "second"}), base_url=server.url, sleep=lambda _: None)
        result = run_validation(make_reviews(n_papers=3), ValidateConfig(strategies=["rephrase", "rephrase_second"], metrics=["bleu"], bootstrap_resamples=0, min_pairs=2,
                                                                   rephrase_llm=CFG.model_copy(update={"model": "second"})), resources=Resources(), backend=first, backends={"rephrase_second": second}, perturbers={"rephrase": "anthropic:first", "rephrase_second": "anthropic:second"})
    texts = {s: t for s, t in result.perturbations.select("strategy", "review_text").rows()}
    assert texts["rephrase"].startswith("[first] ") and texts["rephrase_second"].startswith("[second] ")
    assert dict(result.validation.select("strategy", "perturber").rows()) == {
        "rephrase": "anthropic:first", "rephrase_second": "anthropic:second"}
    assert result.validation["seed"].to_list() == [0, 0] and result.validation["level"].to_list() == ["raw", "raw"]


def test_llm_strategies_rewrite_in_two_lanes_side_by_side(monkeypatch):
    """With a second backend beside the first, the LLM strategies run in two lanes at the same time (a
    request of each lane is in flight at once): each lane starts with the next strategy, a free lane takes
    the one after, and the rows come back in the strategies' order."""
    import threading

    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    both = threading.Barrier(2, timeout=30)     # the first request of each lane waits for the other's
    waited: set[str] = set()
    lock = threading.Lock()

    def responder(params: dict[str, Any]) -> str:
        with lock:
            first = params["model"] not in waited
            waited.add(params["model"])
        if first:
            both.wait()
        return f"[{params['model']}] {user_text(params)}"

    strategies = ["rephrase", "opinion_shift_positive", "surface_report"]
    with AnthropicServer(responder) as server:
        lane_a = AnthropicLM(CFG.model_copy(update={"model": "lane-a"}), base_url=server.url, sleep=lambda _: None)
        lane_b = AnthropicLM(CFG.model_copy(update={"model": "lane-b"}), base_url=server.url, sleep=lambda _: None)
        result = run_validation(make_reviews(n_papers=3), ValidateConfig(strategies=strategies, metrics=["bleu"],
                                                                        bootstrap_resamples=0, min_pairs=2),
                                resources=Resources(), backend=lane_a, beside=lane_b)
    assert not both.broken and waited == {"lane-a", "lane-b"}
    done = result.perturbations.filter(result.perturbations["error"].is_null())
    by_row = [(s, t.split("]")[0] + "]") for s, t in done.select("strategy", "review_text").rows()]
    # three candidates: parts of two and one (a batch at most, half the rows at most), the first two jobs
    # (rephrase's parts) one in each lane, the rest to whichever lane came free first
    assert [lane for s, lane in by_row if s == "rephrase"] == ["[lane-a]", "[lane-a]", "[lane-b]"]
    assert len(by_row) == 9 and {lane for _, lane in by_row} == {"[lane-a]", "[lane-b]"}
    assert list(dict.fromkeys(result.perturbations["strategy"].to_list())) == strategies


def test_a_second_evaluation_lms_run_tests_the_same_perturbations_without_asking_again(tmp_path, monkeypatch):
    """Runs that share `made` (one per evaluation LM) perturb once: the second asks the LLM nothing, not
    even the rewrite that failed (the cache keeps no failed answer, so a run on its own asks it again)."""
    from tasks.lm import make_lm

    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    asked: list[str] = []

    def responder(params: dict[str, Any]) -> str:
        asked.append(user_text(params))
        return "" if len(asked) == 1 else f"Rewritten. {user_text(params)[-200:]}"

    settings = ValidateConfig(strategies=["rephrase", "surface_report"], metrics=["bleu"], bootstrap_resamples=0,
                              min_pairs=2)
    made: dict = {}
    with AnthropicServer(responder) as server:
        llm = make_lm(CFG, tmp_path / "llm", base_url=server.url)
        first = run_validation(make_reviews(n_papers=3), settings, resources=Resources(), backend=llm, made=made)
        sent = len(asked)
        second = run_validation(make_reviews(n_papers=3), settings, resources=Resources(), backend=None, made=made)
        assert len(asked) == sent
        alone = run_validation(make_reviews(n_papers=3), settings, resources=Resources(), backend=llm)
    assert first.perturbations["error"].is_not_null().sum() == 1 and list(made) == [False]
    assert second.perturbations.equals(first.perturbations) and second.rejects.equals(first.rejects)
    assert len(asked) == sent + 1 and alone.perturbations["error"].is_null().all()
