"""The metrics behind an LLM as paper shards (tasks/scoring/metric_shards.py): the same scores as the
unsharded path, a finished shard skipped on rerun, a score run killed mid-stage resumed without
recomputing a finished shard, and the score flow fanning them out on threads and on a Dask cluster.
The oracle and the judges answer from the local OpenAI-compatible server, by the hash of the question."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import polars as pl
import pytest

from tasks.core.config import load_config
from tasks.core.layout import cache_dir, slug, stage_dir
from tasks.metrics import get
from tasks.stages.score.stage import (
    metric_shards,
    read_inputs,
    score_inputs_each_eval_lm,
    sharded_loglikelihoods,
)
from tasks.testing.anthropic_server import user_text
from tasks.testing.openai_server import OpenAIServer
from tests.crash import killed_when
from tests.scoring_data import VENUE, write_pipeline

ROOT = Path(__file__).resolve().parents[2]
METRICS = ["llm_judge", "llm_judge_noref", "tvd_mi", "gppm_judgment", "kl_fvar_report", "reviseval_bleu",
           "reviseval_judge", "rating_mae", "accept_accuracy"]
SORT = ["metric", "paper_id", "candidate", "reference", "eval_lm"]


def answer(body: dict) -> str:
    """A yes/no, a support bin and a rating, each fixed by the question's hash."""
    h = int(hashlib.sha256(user_text(body).encode()).hexdigest(), 16)
    return f"{'Yes' if h % 2 else 'No'}. {h % 7 + 1}. Score: {h % 11}"


def slow_answer(body: dict) -> str:
    time.sleep(0.2)
    return answer(body)


def _config(tmp_path: Path, server: OpenAIServer, n_papers: int = 4, **score: object) -> Path:
    """Pipeline "t" scoring the LLM metrics (one paper per shard) and BLEU, with ratings and decisions."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = write_pipeline(tmp_path, n_papers=n_papers, n_reviews=3, metrics=METRICS, baselines=["bleu"],
                            oracle_predictor="generate", judge_method="generate", negatives=2,
                            metric_shard_papers=1, **score)
    with config.open("a") as f:
        f.write(f'\n[score.oracle]\nbackend = "openai"\nmodel = "oracle-x"\nbase_url = "{server.base_url}"\n'
                'api_key_env = ""\nuse_batches = false\nmax_retries = 0\n')
    curate = tmp_path / "data" / "t" / slug(VENUE) / "curate"
    reviews = pl.read_parquet(curate / "reviews.parquet")
    reviews.with_columns(rating=(pl.int_range(pl.len()) % 4 * 2 + 3).cast(pl.Float64)).write_parquet(
        curate / "reviews.parquet")
    pl.DataFrame({"paper_id": [f"paper{p}" for p in range(n_papers)],
                  "decision": ["Accept" if p % 2 else "Reject" for p in range(n_papers)],
                  "in_benchmark": [True] * n_papers}).write_parquet(
        curate / "papers.parquet")
    return config


def _killed_after_a_metric_shard(config: Path, stage: str, call: str) -> dict[Path, int]:
    """`call` (Python, with `cfg` the config of pipeline "t") in a child process, SIGKILLed once one of the
    stage's metric shards has its scores; each finished shard's scores file and its mtime (1 to 3 of 4)."""
    folder = config.parent / "data" / "t" / stage / "metric_shards"
    script = "import sys; from tasks.core.config import load_config; cfg = load_config(sys.argv[1]).for_pipeline('t'); "
    killed_when(script + call, [str(config)], lambda: bool(list(folder.glob("*/scores.parquet"))), timeout=300)
    finished = {p: p.stat().st_mtime_ns for p in folder.glob("*/scores.parquet")}
    assert 0 < len(finished) < 4
    return finished


def _score(cfg, sharded: bool):
    inputs = read_inputs(cfg, "t")
    llm = cache_dir(cfg, "llm")
    by_paper = metric_shards(cfg, "t", llm) if sharded else None
    scored, log = score_inputs_each_eval_lm(cfg, "t", inputs, sharded_loglikelihoods(cfg, "t"), llm_cache=llm,
                                            by_paper=by_paper)
    return scored.scores.sort(SORT), log, by_paper, scored.tables


def test_sharded_scores_equal_the_unsharded_ones_and_a_rerun_skips_every_shard(tmp_path) -> None:
    with OpenAIServer(answer) as server:
        cfg = load_config(_config(tmp_path, server)).for_pipeline("t")
        assert {m.name for m in get(cfg.score.all_metrics) if m.by_paper} == set(METRICS)
        whole, whole_log, _, whole_tables = _score(cfg, sharded=False)
        asked = server.counts["chat"]
        sharded, log, by_paper, tables = _score(cfg, sharded=True)
        assert server.counts["chat"] == asked, "the shards asked again what the LLM cache holds"
        assert by_paper.details() == {"metric_shards": 4, "metric_shards_scored": 4, "metric_shards_skipped": 0}
        assert sharded.equals(whole) and whole.height > 0
        assert set(sharded["metric"]) == {*METRICS, "bleu"} and sharded["score"].is_nan().sum() < sharded.height
        assert log.usage()["requests"].sum() == whole_log.usage()["requests"].sum()
        assert tables["review_quality"].sort("metric", "candidate").equals(
            whole_tables["review_quality"].sort("metric", "candidate"))

        folder = stage_dir(cfg, "t", "score") / "metric_shards"
        done = {p: p.stat().st_mtime_ns for p in folder.glob("*/scores.parquet")}
        again, _, rerun, _ = _score(cfg, sharded=True)
        assert rerun.details()["metric_shards_skipped"] == 4 and again.equals(whole)
        assert all(p.stat().st_mtime_ns == ns for p, ns in done.items())

        first = sorted(done)[0]
        first.unlink()
        _, _, one, _ = _score(cfg, sharded=True)
        assert one.details()["metric_shards_scored"] == 1 and first.is_file()


@pytest.mark.slow
def test_with_two_slots_the_shards_run_beside_the_other_families_with_the_same_scores(tmp_path, monkeypatch) -> None:
    """`[score] gpu_concurrency = 2`: the paper shards run in a thread of their own while the families
    (here BLEU) score in the caller's; the rows are those of one slot."""
    import threading
    from dataclasses import replace

    import tasks.metrics.registry as registry
    from tasks.scoring.metric_shards import MetricShards

    with OpenAIServer(answer) as server:
        one = load_config(_config(tmp_path / "one", server)).for_pipeline("t")
        two = load_config(_config(tmp_path / "two", server, gpu_concurrency=2)).for_pipeline("t")
        assert not metric_shards(one, "t", None).beside and metric_shards(two, "t", None).beside
        where: dict[str, str] = {}
        real_shards, real_bleu = MetricShards.__call__, registry.REGISTRY["bleu"].fn

        def shards_noting_their_thread(self, *args, **kwargs):
            where["shards"] = threading.current_thread().name
            return real_shards(self, *args, **kwargs)

        def bleu_noting_its_thread(*args, **kwargs):
            where["bleu"] = threading.current_thread().name
            return real_bleu(*args, **kwargs)

        monkeypatch.setattr(MetricShards, "__call__", shards_noting_their_thread)
        monkeypatch.setitem(registry.REGISTRY, "bleu", replace(registry.REGISTRY["bleu"], fn=bleu_noting_its_thread))
        alone = _score(one, sharded=True)[0]
        assert where == {"shards": threading.current_thread().name, "bleu": threading.current_thread().name}
        beside = _score(two, sharded=True)[0]
        assert where["shards"].startswith("paper-shards") and where["bleu"] == threading.current_thread().name
        assert beside.equals(alone) and set(beside["metric"]) == {*METRICS, "bleu"}


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_score_flow_fans_metric_shards_out_on_threads_and_on_dask(tmp_path, prefect_harness, dask_cluster,
                                                                 monkeypatch) -> None:
    from distributed import get_worker

    import tasks.scoring.metric_shards as metric_shards_module
    from flows.score import score_flow

    with OpenAIServer(answer) as server:
        cfg = load_config(_config(tmp_path / "threads", server)).for_pipeline("t")
        summary = score_flow(cfg, "t")
        assert summary.details["metric_shards"] == summary.details["metric_shards_scored"] == 4
        scores = pl.read_parquet(stage_dir(cfg, "t", "score") / "scores.parquet").sort(SORT)
        assert scores.equals(_score(cfg, sharded=False)[0])
        again = score_flow(cfg, "t")
        assert again.details["metric_shards_skipped"] == 4 and again.details["metric_shards_scored"] == 0

        seen = tmp_path / "workers"
        seen.mkdir()
        real = metric_shards_module.score_metric_shard

        def recording(folder, shard, names, cfg, pipeline, llm_cache):
            # the task travels to the workers pickled by value, so note the worker in a file, not a variable
            (seen / shard).write_text(get_worker().address)
            return real(folder, shard, names, cfg, pipeline, llm_cache)

        monkeypatch.setattr(metric_shards_module, "score_metric_shard", recording)
        dask = load_config(_config(tmp_path / "dask", server, task_runner="dask",
                                   runner_address=dask_cluster.scheduler_address, gpu_concurrency=2)).for_pipeline("t")
        summary = score_flow(dask, "t")
        assert summary.details["metric_shards_scored"] == 4
        assert len({p.read_text() for p in seen.iterdir()}) == 2, "both dask workers scored metric shards"
        assert pl.read_parquet(stage_dir(dask, "t", "score") / "scores.parquet").sort(SORT).equals(scores)


VALIDATE = ('\n[validate]\nmetrics = ["llm_judge", "tvd_mi"]\nstrategies = ["sentence_deletion", "case_upper"]\n'
            'candidates = "one"\nmin_pairs = 2\nbootstrap_resamples = 0\nlevel = ["judgments"]\n')
CANDIDATE_SORT = ["paper_id", "candidate", "metric"]


def _validate_config(tmp_path: Path, server: OpenAIServer) -> Path:
    config = _config(tmp_path, server)
    with config.open("a") as f:
        f.write(VALIDATE)
    return config


@pytest.mark.slow
def test_validation_rescores_the_llm_metrics_as_paper_shards_fanned_out_and_skipped_on_rerun(
        tmp_path, prefect_harness) -> None:
    from flows.validate import validate_flow
    from tasks.metrics.resources import build_resources
    from tasks.stages.validate.stage import read_reviews, validate_pipeline, validate_reviews

    with OpenAIServer(answer) as server:
        cfg = load_config(_validate_config(tmp_path, server)).for_pipeline("t")
        first = validate_flow(cfg, "t").details   # one Prefect task per metric shard, from inside the validate task
        assert first["metric_shards"] == first["metric_shards_scored"] == 4 and first["metric_shards_skipped"] == 0
        assert len(list((stage_dir(cfg, "t", "validate") / "metric_shards").glob("*/scores.parquet"))) == 4

        again = validate_pipeline(cfg, "t")
        assert again.stats["metric_shards_skipped"] == 4 and again.stats["metric_shards_scored"] == 0
        in_process = validate_reviews(cfg, read_reviews(cfg, "t"), build_resources(cfg.score, llm_cache=cache_dir(cfg, "llm")))
        assert again.scores.sort(CANDIDATE_SORT).equals(in_process.scores.sort(CANDIDATE_SORT))
        assert set(again.scores["metric"]) == {"llm_judge", "tvd_mi"} and again.scores["score"].is_not_nan().any()
        assert again.validation.height == 4


KILLED = {  # what the killed child runs, per stage (`cfg` is pipeline "t"'s config)
    "score": ("from tasks.core.layout import cache_dir; from tasks.stages.score.stage import metric_shards, "
              "read_inputs, score_inputs_each_eval_lm, sharded_loglikelihoods; score_inputs_each_eval_lm(cfg, 't', "
              "read_inputs(cfg, 't'), sharded_loglikelihoods(cfg, 't'), llm_cache=cache_dir(cfg, 'llm'), "
              "by_paper=metric_shards(cfg, 't', cache_dir(cfg, 'llm')))"),
    "validate": "from tasks.stages.validate.stage import validate_pipeline; validate_pipeline(cfg, 't')",
}


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("stage", ["score", "validate"])
def test_a_killed_run_resumes_without_recomputing_a_finished_metric_shard(tmp_path, stage) -> None:
    from tasks.stages.validate.stage import validate_pipeline

    with OpenAIServer(slow_answer) as server:
        config = (_config if stage == "score" else _validate_config)(tmp_path, server)
        finished = _killed_after_a_metric_shard(config, stage, KILLED[stage])
        cfg = load_config(config).for_pipeline("t")
        if stage == "score":
            scores, _, by_paper, _ = _score(cfg, sharded=True)
            details = by_paper.details()
            assert scores.equals(_score(cfg, sharded=False)[0])
        else:
            details = validate_pipeline(cfg, "t").stats
        assert details["metric_shards_skipped"] == len(finished)
        assert details["metric_shards_scored"] == 4 - len(finished)
        assert all(p.stat().st_mtime_ns == ns for p, ns in finished.items())   # none rewritten


def test_a_model_added_later_adds_shards_and_leaves_every_earlier_one_as_it_was(tmp_path) -> None:
    """One model's shards hold none of another's candidates (nor its ratings in the facts they hash): the
    shards of the models scored before a newcomer keep their names, so their finished scores are reused
    instead of recomputed in a batch that holds the newcomer's questions."""
    from tasks.metrics.negatives import draw_negatives
    from tasks.scoring.metric_shards import write_metric_shards
    from tests.scoring.test_eval_lms import write_generated

    with OpenAIServer(answer) as server:
        cfg = load_config(_config(tmp_path, server, n_papers=2)).for_pipeline("t")
    write_generated(tmp_path)
    inputs = read_inputs(cfg, "t")
    names = tuple(METRICS)

    def shards(candidates: pl.DataFrame, folder: str) -> dict[str, set[str]]:
        negatives = draw_negatives(candidates, inputs.references, 2, 0)
        facts = [candidates.select(pl.col("candidate").alias("review_id"), "paper_id",   # as review quality's ratings
                                   rating=pl.col("candidate").str.len_chars().cast(pl.Float64))]
        written = write_metric_shards(tmp_path / folder, cfg, names, "smollm2", candidates, inputs.references,
                                      inputs.synopses, negatives, 8, facts)
        return {name: set(pl.read_parquet(tmp_path / folder / name / "candidates.parquet")["source"])
                for name in written}

    assert {"human", "gen-a", "gen-b"} <= set(inputs.candidates["source"])
    before = shards(inputs.candidates.filter(pl.col("source") != "gen-b"), "before")
    after = shards(inputs.candidates, "after")
    assert all(len(sources) == 1 for sources in after.values())          # one model a shard
    assert set(before) < set(after) and {s for n in set(after) - set(before) for s in after[n]} == {"gen-b"}


def pairwise_answer(body: dict) -> str:
    """A revision for the reviser, and for the pairwise judge the review holding "questions the baselines"
    (gen-a's) as the better one, in whichever position it is shown."""
    user = user_text(body)
    if "Which review is better" not in user:
        return "A revised review: the reviewer questions the baselines."
    first = user.split("<review_a>")[1].split("</review_a>")[0]
    return "A" if "questions the baselines" in first else "B"


def test_the_pairwise_judge_sees_every_model_of_a_paper_in_its_shard(tmp_path) -> None:
    """The shards of the other metrics hold one model's candidates each; the pairwise judge compares the
    models of a paper, so its shards hold them all and its rows equal the unsharded ones."""
    from tests.scoring.test_eval_lms import write_generated

    with OpenAIServer(pairwise_answer) as server:
        config = write_pipeline(tmp_path, n_papers=2, n_reviews=3, metrics=["pairwise_judge", "llm_judge_noref"],
                                judge_method="generate", metric_shard_papers=1)
        with config.open("a") as f:
            f.write(f'\n[score.oracle]\nbackend = "openai"\nmodel = "judge-x"\nbase_url = "{server.base_url}"\n'
                    'api_key_env = ""\nuse_batches = false\nmax_retries = 0\n')
        write_generated(tmp_path)
        cfg = load_config(config).for_pipeline("t")
        assert get(["pairwise_judge"])[0].across_models and not get(["llm_judge_noref"])[0].across_models
        whole, _, _, whole_tables = _score(cfg, sharded=False)
        sharded, _, by_paper, tables = _score(cfg, sharded=True)
    # 2 papers: the pairwise judge's shard per paper (both models) and llm_judge_noref's per paper and model
    assert by_paper.details()["metric_shards"] == 2 + 2 * 3   # human, gen-a, gen-b
    pairwise = sharded.filter(metric="pairwise_judge").sort("candidate")
    assert pairwise.equals(whole.filter(metric="pairwise_judge").sort("candidate"))
    assert dict(pairwise.select("candidate", "score").iter_rows()) == {
        "gen-a/paper0": 1.0, "gen-a/paper1": 1.0, "gen-b/paper0": 0.0, "gen-b/paper1": 0.0}
    assert tables["pairwise"].height == 2 and not tables["pairwise"]["flipped"].any()
    assert tables["pairwise"].sort("paper_id").equals(whole_tables["pairwise"].sort("paper_id"))
