"""No leftovers and one line per failure: a killed run's Prefect server, a truncated cached PDF, an
unreachable LLM, a full disk and a read-only folder."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from tasks.core.config import LLMConfig, load_config
from tasks.core.errors import UnreachableError
from tasks.lm.openai_api import OpenAILM
from tasks.lm.types import ChatRequest
from tasks.stages.ingest.fetch import ingest_venue
from tasks.stages.materialize.build import build_database
from tasks.testing.pipelines import synthetic_pipeline
from tests.stages.ingest.test_hardening_ingest import VENUE, config, server  # noqa: F401 - the fixture is used by name
from tests.stages.materialize.test_materialize import write_outputs

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _cli(args: list[str], cwd: Path, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "flows.cli.main", *args], cwd=cwd, env=ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def _is_server(pid: int) -> bool:
    try:
        return b"create_app" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


SYNTHETIC = """
[paths]
data_dir = "data"
database = "data/{pipeline}/grebench.duckdb"
[ingest]
pdf = false
backoff_seconds = 0.05
""" + synthetic_pipeline("s", ("ingest", "curate", "materialize"), synthetic={"n_papers": 6, "pdfs": False})


@pytest.mark.slow
def test_a_killed_run_leaves_no_prefect_server_behind(tmp_path):
    (tmp_path / "pipelines.toml").write_text(SYNTHETIC)
    proc = _cli(["run", "s", "-c", str(tmp_path / "pipelines.toml")], tmp_path)
    deadline = time.monotonic() + 240
    servers: list[int] = []
    while time.monotonic() < deadline and proc.poll() is None and not servers:
        servers = [p for p in _children(proc.pid) if _is_server(p)]
        time.sleep(0.2)
    assert servers, "the run started no Prefect server"
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    gone_by = time.monotonic() + 15
    while time.monotonic() < gone_by and any(_alive(p) for p in servers):
        time.sleep(0.2)
    assert not any(_alive(p) for p in servers), "the Prefect server outlived the killed run"


def test_a_truncated_cached_pdf_is_quarantined_and_fetched_again(server, tmp_path):  # noqa: F811
    cfg = config(tmp_path, pdf=True)
    out = tmp_path / "out"
    ingest_venue(VENUE, cfg, out, server.v2_url)
    corrupt = pl.col("rule") == "corrupt_pdf"
    served_broken = set(pl.read_parquet(out / "rejects.parquet").filter(corrupt)["entity_id"])  # bad cases
    pdf = next(p for p in sorted((out / "pdfs").glob("*.pdf")) if p.stem not in served_broken)
    whole = pdf.read_bytes()
    pdf.write_bytes(whole[: len(whole) // 2])          # a download cut short by a crash, or a bad disk
    ingest_venue(VENUE, cfg, out, server.v2_url)
    assert pdf.read_bytes() == whole
    [aside] = (out / "pdfs" / "quarantine").iterdir()
    assert aside.name.startswith(pdf.name)
    rejects = pl.read_parquet(out / "rejects.parquet")
    assert set(rejects.filter(corrupt)["entity_id"]) == served_broken       # the server's, kept, not refetched


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_unreachable_llm_fails_fast_with_one_line_naming_its_url():
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    lm = OpenAILM(LLMConfig(backend="openai", model="m", base_url=url, api_key_env="", max_retries=2,
                            use_batches=False, retry_max_seconds=0.2))
    started = time.monotonic()
    with pytest.raises(UnreachableError) as raised:
        lm.generate([ChatRequest("s", f"u{i}", 8) for i in range(4)])
    message = str(raised.value)
    assert "127.0.0.1" in message and "connection refused" in message and "\n" not in message
    assert time.monotonic() - started < 60
    with pytest.raises(UnreachableError):      # remembered: no more waiting on a dead address
        lm.generate([ChatRequest("s", "again", 8)])


@pytest.mark.slow
def test_validate_with_an_unreachable_llm_exits_non_zero_with_one_line(tmp_path):
    from tests.cli.test_cli_validate import review_file

    url = f"http://127.0.0.1:{_closed_port()}/v1"
    path = tmp_path / "pipelines.toml"
    path.write_text(f"[paths]\ndata_dir = 'data'\n[validate]\nmax_papers = 10\nmin_pairs = 2\n"
                    f"[validate.perturb_llm]\nbackend = 'openai'\nmodel = 'm'\nbase_url = '{url}'\napi_key_env = ''\n"
                    "max_retries = 1\nretry_max_seconds = 0.2\nuse_batches = false\n")
    started = time.monotonic()
    proc = _cli(["validate", "--reviews", review_file(tmp_path), "--metric", "bleu", "--strategies", "rephrase",
                 "-c", str(path)], tmp_path)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, err[-2000:]
    [line] = [x for x in err.splitlines() if x.startswith("error:")]
    assert f"cannot reach {url}" in line and "Traceback" not in err
    assert time.monotonic() - started < 120


# ---- a full disk and a read-only folder (a tmpfs of our own, in a user + mount namespace) ---------

def _namespace() -> bool:
    if not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0


needs_namespace = pytest.mark.skipif(not _namespace(), reason="needs unshare -rm (user and mount namespaces)")


def _in_namespace(mount: str, folder: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    command = " ".join(["mount", "-t", "tmpfs", "-o", mount, "tmpfs", str(folder), "&&",
                        "exec", sys.executable, "-m", "flows.cli.main", *(f"'{a}'" for a in args)])
    return subprocess.run(["unshare", "-rm", "sh", "-c", command], cwd=cwd, env=ENV, capture_output=True, text=True,
                          timeout=300)


@needs_namespace
def test_a_full_disk_while_building_is_one_line_and_keeps_the_old_database(tmp_path):
    import duckdb

    (tmp_path / "pipelines.toml").write_text(
        "[paths]\ndata_dir = 'data'\ndatabase = 'db/grebench.duckdb'\n"
        "[pipelines.t]\nvenues = ['Test.cc/2025/Conference']\nstages = ['ingest', 'curate', 'materialize']\n")
    cfg = load_config(tmp_path / "pipelines.toml")
    write_outputs(cfg)
    (tmp_path / "db").mkdir()
    script = ("import sys; from tasks.core.config import load_config; from tasks.stages.materialize.build import build_database; "
              "from flows.cli.main import situation\n"
              "try:\n    build_database(load_config(sys.argv[1]), 't')\n"
              "except Exception as e:\n    print(situation(e)); raise SystemExit(1)\n")
    command = (f"mount -t tmpfs -o size=200k tmpfs {tmp_path / 'db'} && "
               f"exec {sys.executable} -c \"{script}\" {tmp_path / 'pipelines.toml'}")
    done = subprocess.run(["unshare", "-rm", "sh", "-c", command], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stdout.startswith("the disk is full") and "nothing already written was lost" in done.stdout
    # outside the namespace the folder never filled: a build there works and nothing was left over
    build_database(cfg, "t")
    with duckdb.connect(str(cfg.database), read_only=True) as con:
        assert con.execute("select count(*) from reviews").fetchone() == (3,)


@needs_namespace
@pytest.mark.parametrize("command", ["site", "report"])
def test_a_full_or_read_only_output_folder_is_one_line(tmp_path, command):
    (tmp_path / "pipelines.toml").write_text(
        "[paths]\ndata_dir = 'data'\n"
        "[pipelines.t]\nvenues = ['Test.cc/2025/Conference']\nstages = ['ingest', 'curate', 'materialize']\n")
    cfg = load_config(tmp_path / "pipelines.toml")
    write_outputs(cfg)
    build_database(cfg, "t")
    out = tmp_path / "out"
    out.mkdir()
    flag = "--out" if command == "site" else "--out-dir"
    for mount, needle, code in (("ro", "not writable", 2), ("size=8k", "the disk is full", 1)):
        done = _in_namespace(mount, out, [command, flag, str(out / "x"), "-c", str(tmp_path / "pipelines.toml")],
                             tmp_path)
        assert done.returncode == code, done.stderr[-2000:]
        errors = [x for x in done.stderr.splitlines() if x.startswith("error:")]
        assert len(errors) == 1 and needle in errors[0] and "Traceback" not in done.stderr, done.stderr[-2000:]
