"""`grebench reproduce gem-table2` on a tiny made-up release: the release read in its own shape
(one file per reviewer, or the dev file's one row per review), the paper's cells the run cannot
measure listed with their reason, and the project's SMDs beside the paper's with sign and
significance compared cell by cell."""

from __future__ import annotations

import json
import math

import polars as pl
import pytest
from typer.testing import CliRunner

from flows.cli.main import app
from tasks.report import gem_table2 as table2
from tasks.testing.pipelines import results_config

runner = CliRunner()
TOPICS = ["graph layouts", "protein folding", "robot grasping", "speech codecs", "image priors", "climate sensors"]


EXTRA = ["The reviewer appreciates the released code.", "The reviewer criticizes the missing error bars.",
         "The reviewer questions the choice of the learning rate.", "The reviewer suggests a comparison with priors.",
         "The reviewer criticizes the unclear notation in the method section.", "The reviewer appreciates the figures."]


def judgments(topic: str, reviewer: int) -> str:
    lines = [f"The reviewer appreciates the clear study of {topic} in section {reviewer}.",
             f"The reviewer criticizes the small {topic} benchmark with only {reviewer + 2} runs.",
             f"The reviewer questions whether the {topic} baseline was tuned as carefully.",
             f"The reviewer suggests an ablation of the {topic} loss terms."]
    seed = len(topic) + 3 * reviewer
    return "\n".join(lines[: 2 + seed % 3] + EXTRA[seed % 4: seed % 4 + 1 + reviewer])


MORE = ["The related work omits two recent baselines.", "Table 2 lacks standard deviations.",
        "The proof of the main lemma skips a step.", "The code is promised but not released.",
        "Figure 3 is hard to read in grey scale.", "The writing is careful and precise."]


def review(topic: str, reviewer: int) -> str:
    seed = len(topic) + 3 * reviewer
    extra = " ".join(MORE[(seed + i) % len(MORE)] for i in range(seed % 4))
    return (f"Summary Of The Paper:\n\nThe paper studies {topic} with a new method and reports gains.\n\n"
            f"Strength And Weaknesses:\n\nThe study of {topic} is clear. The benchmark is small with "
            f"{reviewer + 2} runs. The baseline may be weakly tuned. An ablation of the loss is missing. {extra}\n\n"
            f"Summary Of The Review:\n\nA reasonable paper on {topic} that needs stronger experiments.")


@pytest.fixture
def release(tmp_path):
    """A release in the GEM files' shape: one file per reviewer, the GPT-4o judgments in review_summary."""
    folder = tmp_path / "release"
    folder.mkdir()
    for k in (1, 2, 3):
        pl.DataFrame({"forum": [f"p{i}" for i in range(len(TOPICS))],
                      "review": [review(t, k) for t in TOPICS],
                      "review_summary": [judgments(t, k) for t in TOPICS]}).write_parquet(
            folder / f"dataset_human_review{k}.parquet")
    return folder


@pytest.fixture
def config(tmp_path):
    return results_config(tmp_path / "pipelines.toml", "[validate]\nmin_pairs = 2\nbootstrap_resamples = 0\n")


def test_the_release_is_read_in_either_shape(release, tmp_path):
    files = table2.release_files(release, tmp_path / "cache")
    reviews = table2.release_reviews(files)
    assert reviews.height == 18 and reviews.columns == ["paper_id", "reviewer", "review", "judgments", "abstract"]
    assert sorted(reviews["reviewer"].unique()) == ["1", "2", "3"]
    dev = tmp_path / "dev.parquet"
    reviews.rename({"judgments": "judgments_reference"}).drop("abstract").with_columns(
        pl.col("reviewer").cast(pl.Int32)).write_parquet(dev)
    again = table2.release_reviews(table2.release_files(dev, tmp_path / "cache"))
    assert again.drop("abstract").equals(reviews.drop("abstract"))
    sample = table2.sample_papers(reviews, 4, seed=0)
    assert sample["paper_id"].n_unique() == 4 and sample.height == 12
    with pytest.raises(table2.ReleaseError, match="no review column"):
        pl.DataFrame({"paper_id": ["p"], "text": ["x"]}).write_parquet(tmp_path / "bad.parquet")
        table2.release_reviews([tmp_path / "bad.parquet"])


def test_the_papers_figures_are_the_table_with_its_intervals():
    assert PAPER_ROWS == 60
    gem = table2.PAPER_TABLE.filter((pl.col("paper_metric") == "GEM") & (pl.col("strategy") == "sentence_deletion"))
    assert gem.select("paper_smd", "paper_low", "paper_high").row(0) == (-0.401, -0.448, -0.354)
    inside = table2.PAPER_TABLE.filter((pl.col("paper_low") > pl.col("paper_smd")) | (pl.col("paper_high") < pl.col("paper_smd")))
    assert inside.is_empty()                                   # every SMD inside its own interval


PAPER_ROWS = table2.PAPER_TABLE.height


def test_side_by_side_compares_sign_and_significance():
    validation = pl.DataFrame([
        {"metric": "gem", "strategy": "sentence_deletion", "n": 30, "smd": -0.5, "p_value": 0.001,
         "ci_low": -0.9, "ci_high": -0.2, "reason": None},
        {"metric": "bleu", "strategy": "meaningless_elongation", "n": 30, "smd": 0.2, "p_value": 0.3,
         "ci_low": -0.1, "ci_high": 0.4, "reason": None},
        # a manipulation's one-sided p cannot see a fall; its interval does
        {"metric": "gem", "strategy": "meaningless_elongation", "n": 24, "smd": -0.3, "p_value": 0.99,
         "ci_low": -0.5, "ci_high": -0.1, "reason": "6 of 30 perturbations unusable (answer cut at max_tokens: 6)"},
        {"metric": "rouge_l", "strategy": "sentence_deletion", "n": 1, "smd": math.nan, "p_value": math.nan,
         "ci_low": math.nan, "ci_high": math.nan, "reason": "too_few_pairs"}])
    table = table2.side_by_side(validation, {"lm_examiner": "reads the paper"}, alpha=0.05)
    by = {(r["metric"], r["strategy"]): r for r in table.iter_rows(named=True)}
    gem = by[("gem", "sentence_deletion")]
    assert (gem["sign_agrees"], gem["significance_agrees"], gem["significant"]) == (True, True, True)
    assert (gem["ci_low"], gem["ci_high"], gem["kind"]) == (-0.9, -0.2, "degradation")
    bleu = by[("bleu", "meaningless_elongation")]      # paper: -0.165, a fall (not a significant rise); ours: +0.2, p 0.3
    assert (bleu["sign_agrees"], bleu["paper_significant"], bleu["significant"]) == (False, False, False)
    assert bleu["significance_agrees"] is True
    # a manipulation's cell is marked only for a significant rise: a fall with p = 0.99 for a rise is not marked,
    # and neither is the paper's fall (-0.063, interval below 0)
    elongated = by[("gem", "meaningless_elongation")]
    assert (elongated["significant"], elongated["paper_significant"], elongated["significance_agrees"]) == \
        (False, False, True)
    assert elongated["reason"].startswith("6 of 30 perturbations unusable")   # why it has 24 pairs of 30
    assert gem["reason"] is None
    bart = by[("bartscore_f1", "sentence_deletion")]   # the paper's +0.401 is a rise: not a significant fall
    assert bart["paper_significant"] is False and by[("bartscore_f1", "rephrase")]["paper_significant"] is True
    assert by[("rouge_l", "sentence_deletion")]["smd"] is None and by[("rouge_l", "sentence_deletion")]["reason"] == "too_few_pairs"
    assert by[("lm_examiner", "rephrase")]["reason"] == "reads the paper"
    assert by[("gem", "rephrase")]["reason"] == "not asked"


def test_reproduce_prints_the_table_beside_the_papers(release, config):
    args = ["reproduce", "gem-table2", "--release", str(release), "--papers", "5", "--metric", "bleu",
            "--metric", "rouge_l", "--metric", "lm_examiner", "--metric", "gem_s_abstract",
            "--strategies", "sentence_deletion,meaningless_elongation_proxy,rephrase_second", "--config", str(config)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "GEM Table 2 (ICLR 2023): 5 papers of the GEM release, evaluation LM smollm2|" in out
    assert "GEM Algorithm 1: one seeded candidate per paper" in out
    assert "not run: lm_examiner: reads the paper's full text" in out
    assert "not run: gem_s_abstract: is conditioned on the abstract" in out
    assert "not run: rephrase_second: needs a second rephrasing LLM" in out
    rows = json.loads(runner.invoke(app, [*args, "--json"]).stdout.strip().splitlines()[-1])
    assert len(rows) == 4 * 3
    measured = [r for r in rows if r["smd"] is not None]
    assert {(r["metric"], r["strategy"]) for r in measured} <= {
        (m, s) for m in ("bleu", "rouge_l") for s in ("sentence_deletion", "meaningless_elongation")}
    for r in rows:
        assert (r["smd"] is None) == (r["reason"] is not None)          # a cell is measured or says why not
    for r in measured:   # one candidate per paper, the raw review perturbed and read by the raw-text metrics
        assert r["n"] == 5 and r["sign_agrees"] == ((r["smd"] > 0) == (r["paper_smd"] > 0))
        assert r["significance_agrees"] == (r["significant"] == r["paper_significant"])
        assert r["level"] == "raw" and r["perturber"] == (
            "rules" if r["strategy"] == "sentence_deletion" else "rules (proxy of GEM D.2.2: fixed filler, no LLM summaries)")
    # sentence deletion halves the raw review: BLEU against the other reviews falls
    bleu = next(r for r in measured if r["metric"] == "bleu" and r["strategy"] == "sentence_deletion")
    assert bleu["smd"] < 0 and bleu["sign_agrees"] is True
    # the cheaper proxy names itself: every review a candidate, the judgment lines perturbed and read
    proxy = runner.invoke(app, [*args, "--workflow", "judgment-lines"])
    assert proxy.exit_code == 0 and "PROXY judgment-lines (not the paper's workflow)" in proxy.stdout
    rows = json.loads(runner.invoke(app, [*args, "--workflow", "judgment-lines", "--json"]).stdout.strip().splitlines()[-1])
    assert {(r["n"], r["level"]) for r in rows if r["smd"] is not None} == {(15, "judgments")}
    assert runner.invoke(app, [*args, "--workflow", "lines"]).exit_code == 2


def test_a_missing_release_fails_with_one_line(tmp_path, config):
    result = runner.invoke(app, ["reproduce", "gem-table2", "--release", str(tmp_path / "nope"), "--config", str(config)])
    assert result.exit_code == 2 and "no such file or folder" in result.output


def anthropic_config(tmp_path, url: str, monkeypatch):
    """A config whose preprocessing and rewriting LLM is the local Anthropic-compatible server at `url`."""
    config = results_config(tmp_path / "llm.toml", '[preprocess]\nbackend = "anthropic"\nmodel = "claude-test"\n'
                            'use_batches = false\nmax_retries = 0\n\n[validate]\nmin_pairs = 2\nbootstrap_resamples = 0\n')
    monkeypatch.setenv("ANTHROPIC_API_KEY", "fake-test-key-gem-table2")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", url)
    return config


def test_the_llm_strategies_rewrite_a_subset_of_the_sample_when_asked(release, tmp_path, monkeypatch):
    """`--llm-papers`: the rule-based strategies run on every sampled paper, the LLM ones (here rephrase, its
    rewrites then preprocessed into judgments, both by the local Anthropic-compatible server) on a subset."""
    from tasks.testing.anthropic_server import AnthropicServer

    with AnthropicServer() as server:
        config = anthropic_config(tmp_path, server.url, monkeypatch)
        args = ["reproduce", "gem-table2", "--release", str(release), "--papers", "6", "--llm-papers", "3",
                "--metric", "bleu", "--strategies", "sentence_deletion,rephrase", "--config", str(config)]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert "6 papers of the GEM release; LLM strategies on 3 of them" in result.stdout
        asked = len(server.received)
        rows = json.loads(runner.invoke(app, [*args, "--json"]).stdout.strip().splitlines()[-1])
        assert len(server.received) == asked                  # the rerun's rewrites all came from the cache
    by = {r["strategy"]: r for r in rows}
    assert by["sentence_deletion"]["n"] == 6                    # one candidate per paper
    assert by["rephrase"]["n"] == 3                             # the rewritten ones: 3 papers' candidates
    assert by["rephrase"]["perturber"] == "anthropic:claude-test" and by["rephrase"]["level"] == "raw"
    rewrites = [b for b in server.received if "Rewrite the peer review" in json.dumps(b)]
    assert 0 < len(rewrites) <= 3


def test_algorithm1_preprocesses_original_and_perturbed_candidates_alike(release, tmp_path, monkeypatch):
    """GEM's Algorithm 1 with a judgment metric: the candidate's own judgments and its perturbed review's both
    come from the configured preprocessor (the local Anthropic-compatible server), the references keep the
    release's; the rephrase rewrites the candidate's judgment lines (appendix D.2.1), read at level judgments."""
    from tasks.testing.anthropic_server import AnthropicServer

    with AnthropicServer() as server:
        config = anthropic_config(tmp_path, server.url, monkeypatch)
        args = ["reproduce", "gem-table2", "--release", str(release), "--papers", "4", "--metric", "gem",
                "--strategies", "sentence_deletion,rephrase", "--config", str(config), "--json"]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        rows = json.loads(result.stdout.strip().splitlines()[-1])
    by = {r["strategy"]: r for r in rows if r["smd"] is not None}
    assert by["sentence_deletion"]["n"] == 4 and by["sentence_deletion"]["level"] == "raw"
    assert by["rephrase"]["n"] == 4 and by["rephrase"]["level"] == "judgments"
    sent = [json.dumps(b) for b in server.received]
    rephrased_lines = [b for b in sent if "reviewer's judgments of a paper, one per line" in b]
    assert len(rephrased_lines) == 4                            # one rewrite of each candidate's judgment lines
    # preprocessed: the 4 candidates and their 4 shortened reviews (and the 4 rephrased raw reviews: the judgment
    # metric reads the rephrased lines, so those are not preprocessed); never a reference
    references = [line for t in TOPICS for k in (1, 2, 3) for line in review(t, k).splitlines()[-1:]]
    preprocessed = [b for b in sent if "atomic" in b.lower() or "judgment" in b.lower()]
    assert len(preprocessed) >= 8 and references



@pytest.mark.parametrize("content", [b"", b"forum,review\np1,text\n", "binary", "duplicates", "listed_ids"])
def test_a_release_file_that_cannot_be_read_is_one_line_naming_it(tmp_path, config, content):
    path = tmp_path / "mine.parquet"
    if content == "listed_ids":        # a paper id as a list (reviewer 1: the number in the file's name)
        path = tmp_path / "mine1.parquet"
        pl.DataFrame({"forum": [["p0"], ["p1"]], "review": ["a", "b"]}).write_parquet(path)
    elif content == "binary":
        pl.DataFrame({"forum": ["p0", "p1"], "review": ["a", "b"], "judgments": [b"\xff\xfe", b"\x80"]}).write_parquet(path)
    elif content == "duplicates":      # every review under one paper and one reviewer id
        pl.DataFrame({"forum": ["p0"] * 6, "reviewer": ["1"] * 6, "review": [review(t, 1) for t in TOPICS[:6]],
                      "review_summary": [judgments(t, 1) for t in TOPICS[:6]]}).write_parquet(path)
    else:
        path.write_bytes(content)
    result = runner.invoke(app, ["reproduce", "gem-table2", "--release", str(path), "--papers", "5", "--metric", "bleu",
                                 "--strategies", "sentence_deletion", "--config", str(config)])
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.output.startswith("error:") and result.output.count("\n") == 1, result.output
    assert str(path) in result.output and "/tmp" not in result.output.replace(str(tmp_path), ""), result.output


def test_near_constant_scores_are_no_effect_size():
    import numpy as np

    from tasks.stages.validate.stats import paired_test, smd

    rng = np.random.default_rng(3)
    original = -1e5 + rng.normal(0, 1e-11, 6)       # six identical long reviews: equal but for rounding
    perturbed = -1e5 - 4e-5 + rng.normal(0, 1e-11, 6)
    assert np.isnan(smd(original, perturbed))
    test = paired_test(original, perturbed, "degradation", higher_is_better=True)
    assert np.isnan(test.smd) and "do not vary" in test.reason
    assert smd(np.array([1.0, 2.0, 3.0]), np.array([2.0, 3.0, 4.5])) > 0   # a real spread keeps its d


def test_the_release_download_is_bounded_and_a_cut_body_is_one_line(tmp_path, monkeypatch):
    from tasks.testing.local_http import body_server, trickling_server

    with body_server(b"PAR1" + bytes(1000), declared=9000) as url:
        monkeypatch.setattr(table2, "RELEASE_URL", url + "/{repo}/{path}")
        with pytest.raises(table2.ReleaseError, match=r"cut short \(1,004 of 9,000 bytes came\)"):
            table2.release_files(None, tmp_path / "cache")
    with trickling_server(interval=0.3) as url:
        monkeypatch.setattr(table2, "RELEASE_URL", url + "/{repo}/{path}")
        with pytest.raises(table2.ReleaseError, match="not downloaded within 1 s"):
            table2.release_files(None, tmp_path / "cache", timeout_s=1.0)
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


def test_a_fifo_named_like_a_parquet_file_in_a_release_folder_is_one_line_not_a_hang(tmp_path, config):
    import os

    folder = tmp_path / "release"
    folder.mkdir()
    os.mkfifo(folder / "x.parquet")
    os.mkfifo(tmp_path / "alone.parquet")
    for release in (folder, tmp_path / "alone.parquet"):
        result = runner.invoke(app, ["reproduce", "gem-table2", "--release", str(release), "--metric", "bleu",
                                     "--config", str(config)])
        assert result.exit_code == 2 and result.output.startswith("error:"), (result.output, result.exception)
        assert "not a regular file" in result.output and result.output.count("\n") == 1
