"""Shared fixtures. Heavy things (the embedded LM, Prefect's test server) are session-scoped and
only tests marked `slow` may request them: `pytest -m "not slow"` loads no model, starts no server."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# "auto" dtype means float32 in the tests on any CPU (their tolerances and keys are float32's);
# tests/lm/test_bf16.py sets bfloat16 where it means to (tasks/lm/loading.py `cpu_has_bf16`)
os.environ.setdefault("GREBENCH_CPU_BF16", "0")

from tasks.testing.demo import register_doubles  # noqa: E402

register_doubles()   # "served:<model>" and the "synthetic" source, as the flows register them (tasks/testing/demo.py)

ROOT = Path(__file__).resolve().parents[1]
# fixtures that start a server, load a model or run the demo
HEAVY = {"prefect_harness", "embedded_lm", "minilm", "dask_cluster", "demo_run", "demo_database"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Refuse to run a test that starts Prefect's server or loads the embedded LM without the slow
    mark: the fast suite must stay fast."""
    unmarked = [f"{item.nodeid} ({', '.join(sorted(HEAVY & set(item.fixturenames)))})" for item in items
                if HEAVY & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("slow") is None]
    if unmarked:
        raise pytest.UsageError("mark these tests @pytest.mark.slow:\n  " + "\n  ".join(unmarked))


@pytest.fixture(scope="session")
def prefect_harness():
    """Prefect's ephemeral test server, started once; flow tests request this fixture."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory) -> tuple[Path, str]:
    """(the demo's folder, what `grebench run demo` printed): the shipped demo as a newcomer runs it, on a copy of
    the project's pipelines.toml in a temporary folder, once a session; every test that reads its results
    (the docs' queries, the overview, the site in a browser) shares this one run."""
    import subprocess
    import sys

    folder = tmp_path_factory.mktemp("demo")
    (folder / "pipelines.toml").write_text((ROOT / "pipelines.toml").read_text(encoding="utf-8"), encoding="utf-8")
    # the newcomer's machine as it is: its own bf16 units where it has them, not the float32 the other tests pin
    # (on a CPU with bf16 units that is the demo a newcomer gets, in about half the time of the float32 one)
    newcomer = {key: value for key, value in os.environ.items() if key != "GREBENCH_CPU_BF16"}
    run = subprocess.run([sys.executable, "-c", "from flows.cli.main import main; main()", "run", "demo",
                          "--config", str(folder / "pipelines.toml")],
                         cwd=folder, capture_output=True, text=True, timeout=3000, env=newcomer)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return folder, run.stdout


@pytest.fixture(scope="session")
def demo_database(demo_run) -> Path:
    """The results database of the session's demo run."""
    return demo_run[0] / "data" / "demo" / "grebench.duckdb"


@pytest.fixture
def dask_cluster():
    """A two-worker Dask cluster in this process (one thread and one `GPU` resource each, as GRE-bench's
    workers hold: tasks/scoring/cluster.py), with the settings GRE-bench's own workers get
    (tasks/scoring/shards.py DASK_SETTINGS: without them a worker's stack sampling can deadlock this
    interpreter)."""
    import dask
    from distributed import LocalCluster

    from tasks.scoring.shards import DASK_SETTINGS

    with dask.config.set(DASK_SETTINGS), LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                                       resources={"GPU": 1}, dashboard_address=None) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def embedded_lm():
    """(model, tokenizer) of the embedded SmolLM2, loaded once for the whole session."""
    from tasks.lm import ModelSpec, load_model

    return load_model(ModelSpec())


@pytest.fixture
def project_config(tmp_path: Path) -> Callable[[str], Path]:
    """Write tmp_path/pipelines.toml: the project's shared tables (paths, stages, venues) followed
    by `pipelines`, TOML text of the pipelines (and extra venues) a test needs."""
    from tasks.testing.pipelines import shared_tables

    shared = shared_tables(ROOT / "pipelines.toml")

    def write(pipelines: str) -> Path:
        path = tmp_path / "pipelines.toml"
        path.write_text(shared + pipelines)
        return path

    return write


@pytest.fixture
def exam_pipeline(project_config: Callable[[str], Path]) -> Callable[..., object]:
    """The resolved config of an `exam` pipeline (curate -> qualify -> score on the synthetic venue)
    scoring gem and `baselines`; `score` and `qualify` are extra lines of those tables, `tables` extra
    TOML tables (judges, matchers) after them."""
    from tasks.core.config import load_config

    def make(baselines: list[str], items: int, score: str = "", qualify: str = "", tables: str = "") -> object:
        quoted = ", ".join(f'"{b}"' for b in baselines)
        path = project_config(f'''
[pipelines.exam]
source = "synthetic"
venues = ["GREBench.cc/2025/Demo"]
stages = ["curate", "qualify", "score"]

[pipelines.exam.score]
metrics = ["gem"]
baselines = [{quoted}]
{score}
[pipelines.exam.qualify]
items = {items}
{qualify}
{tables}''')
        return load_config(path).for_pipeline("exam")

    return make


@pytest.fixture
def no_openreview_login(monkeypatch):
    """No OpenReview credential in the environment and no token minted earlier, before and after."""
    from tasks.stages.ingest.auth import forget_minted

    for name in ("OPENREVIEW_TOKEN", "OPENREVIEW_USERNAME", "OPENREVIEW_PASSWORD", "OPENREVIEW_TOTP_SECRET"):
        monkeypatch.delenv(name, raising=False)
    forget_minted()
    yield
    forget_minted()
