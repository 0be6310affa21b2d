"""Soak of the hardening list and of the leftovers a crash or a bad server must not turn into a blocked run (slots, options, submitted rows, raw caches, completions servers, flaky servers, submits) and of what a hostile user tried (form labels, credentials, PDF bombs, trickling servers, signals, odd inputs), with the surfaces round of bench/soak/soak_surfaces.py (slow PDFs, the injection track, plan and full, concurrent runs and queries, the site in a browser) the breaks round of bench/soak/soak_breaks.py (echoed passwords, rendered hidden text, damaged files, hostile forms, release and calibration files, unbounded settings, the power plan, fresh caches) and the hostile round of bench/soak/soak_hostile.py (path-like ids, passwords in every encoding, config writes, bounded downloads, settings bounds, wrong-kind columns, hostile workbooks): every way a user could lose results or hang, tried again and again.

    .venv/bin/python bench/soak/soak_hardening.py [--rounds 3] [--only NAME ...] [--skip-slow]

Each scenario is tried `--rounds` times (attempts) through the real command line or the real
module, in a fresh temporary project each time; an attempt "held" when the command behaved as
docs/reliability.md says (exit code, one error line, time bound, nothing left behind) and is
"broken" otherwise, with the reason printed. The kill -9 soak of the database is bench/soak/soak.py.
The last line printed is JSON: attempts, held, broken, per scenario.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from soak_common import (
    ENV,
    ROOT,
    Broken,
    built_project,
    check,
    cli,
    one_error_line,
    scenarios,
    small_db,
    submit_project,
)

from tasks.testing.pipelines import ingest_pipeline, shared_tables

# ---- the scenarios --------------------------------------------------------------------------------

def query_timeout(root: Path) -> None:
    cfg = small_db(root)
    started = time.monotonic()
    done = cli(["query", "with recursive r(i) as (select 1 union all select i + 1 from r) select count(*) from r",
                "--timeout", "2", "-c", str(cfg)], root)
    one_error_line(done, 124, "ran longer than 2 s")
    check(time.monotonic() - started < 60, "took more than a minute")


def query_interrupt(root: Path) -> None:
    cfg = small_db(root)
    proc = subprocess.Popen([sys.executable, "-m", "flows.cli.main", "query",
                             "select count(*) from range(100000000000) a, range(1000) b", "-c", str(cfg)],
                            cwd=root, env=ENV, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not _named_thread(proc.pid, "grebench-query"):
        time.sleep(0.2)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    _, err = proc.communicate(timeout=60)
    check(proc.returncode == 130, f"exit {proc.returncode}: {err[-200:]}")
    check(err.strip().endswith("error: interrupted"), f"stderr {err[-200:]!r}")
    check(time.monotonic() - sent < 10, "slow to stop")


def _named_thread(pid: int, name: str) -> bool:
    try:
        return any(Path(f"/proc/{pid}/task/{t}/comm").read_text().strip() == name for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return False


def query_huge_string(root: Path) -> None:
    cfg = small_db(root)
    started = time.monotonic()
    done = cli(["query", "select length(repeat('x', 4000000000))", "-c", str(cfg)], root)
    one_error_line(done, 2, "Out of Memory")
    check(time.monotonic() - started < 60, "took more than a minute")


def query_raise_limits(root: Path) -> None:
    cfg = small_db(root)
    for sql in ("set memory_limit = '100GB'; select 1", "set max_temp_directory_size = '1TB'; select 1",
                "reset lock_configuration"):
        done = cli(["query", sql, "-c", str(cfg)], root)
        check(done.returncode == 2 and "Traceback" not in done.stderr, f"{sql!r}: exit {done.returncode}")


def query_comment_first(root: Path) -> None:
    cfg = small_db(root)
    done = cli(["query", "-- how many\nselect count(*) as n from reviews", "-f", "csv", "-c", str(cfg)], root)
    check(done.returncode == 0 and done.stdout.splitlines() == ["n", "5"], f"{done.returncode}: {done.stderr[-200:]}")


def random_wal(root: Path) -> None:
    cfg = small_db(root)
    (root / "r.duckdb.wal").write_bytes(os.urandom(8192))
    done = cli(["query", "select count(*) as n from reviews", "-f", "csv", "-c", str(cfg)], root)
    check(done.returncode == 0 and done.stdout.splitlines() == ["n", "5"], f"{done.returncode}: {done.stderr[-200:]}")
    check(not (root / "r.duckdb.wal").exists() and bool(list(root.glob("r.duckdb.wal.stale-*"))), "WAL not set aside")


def lock_timeout(root: Path) -> None:
    from filelock import FileLock

    cfg = small_db(root)
    (root / "r.duckdb.wal").write_bytes(os.urandom(8192))
    lock = FileLock(str(root / "r.duckdb.lock"))
    lock.acquire()
    try:
        started = time.monotonic()
        done = cli(["query", "select 1", "-c", str(cfg)], root, env={"GREBENCH_LOCK_TIMEOUT": "1"})
        one_error_line(done, 2, "GREBENCH_LOCK_TIMEOUT")
        check(time.monotonic() - started < 60, "waited too long")
    finally:
        lock.release()


def two_pipelines(root: Path) -> None:
    from tasks.core.config import load_config
    from tasks.stages.materialize.build import build_database

    cfg = load_config(built_project(root))
    build_database(cfg, "t")
    build_database(cfg, "u")
    for name in ("t", "u"):
        done = cli(["query", "select pipeline from _build", "-f", "csv", "--pipeline", name, "-c",
                    str(root / "pipelines.toml")], root)
        check(done.stdout.splitlines() == ["pipeline", name], f"--pipeline {name}: {done.stdout!r} {done.stderr[-200:]}")


def shared_database(root: Path) -> None:
    from tasks.core.config import load_config
    from tasks.stages.materialize.build import OtherPipelineError, build_database

    cfg = load_config(built_project(root, "data/shared.duckdb"))
    build_database(cfg, "t")
    try:
        build_database(cfg, "u")
    except OtherPipelineError:
        pass
    else:
        raise Broken("pipeline u replaced pipeline t's results")
    done = cli(["query", "select pipeline from _build", "-f", "csv", "-c", str(root / "pipelines.toml")], root)
    check(done.stdout.splitlines() == ["pipeline", "t"], "t's results are gone")


HOSTILE_NAMES = ["/tmp/x", "../../x", "my pipe; rm -rf ~", "..", "$(id)", "a/b"]
HOSTILE_VENUES = ["..", "a/../b", "/etc", "x//y", "V/.."]


def hostile_names(root: Path) -> None:
    for name in HOSTILE_NAMES:
        path = root / "pipelines.toml"
        key = '"' + name.replace('"', '\\"') + '"'
        path.write_text(f"[pipelines.{key}]\nvenues = ['V']\nstages = ['ingest']\n")
        done = cli(["run", name, "-c", str(path)], root)
        one_error_line(done, 2, "not allowed")
        check(not (root / "data").exists() and not Path("/tmp/x").exists(), f"{name!r} wrote something")
    for venue in HOSTILE_VENUES:
        path = root / "pipelines.toml"
        path.write_text(f"[pipelines.p]\nvenues = ['{venue}']\nstages = ['ingest']\n")
        done = cli(["pipelines", "-c", str(path)], root)
        one_error_line(done, 2, "not allowed")


def quoted_suggestions(root: Path) -> None:
    import shlex

    from flows.cli.run import run_summary
    from tasks.core.config import load_config
    from tasks.core.summary import StageSummary

    cfg = load_config(built_project(root)).for_pipeline("t")
    text = run_summary(cfg, "t", {"materialize": StageSummary(1, 1)})
    for line in (x.split("#")[0].strip() for x in text.splitlines()):
        if line.startswith("grebench"):
            check(shlex.split(line)[0] == "grebench" and ";" not in shlex.split(line)[1:2], f"unquoted: {line}")


def long_review(root: Path) -> None:
    from tasks.lm.loglikelihood import LoglikelihoodEngine
    from tasks.lm.types import LoglikelihoodRequest

    model, tokenizer = _tiny_model(root)
    engine = LoglikelihoodEngine(model, tokenizer, token_budget=128)
    review = " ".join(["the", "model", "is", "tested", "on", "data"][i % 6] for i in range(800_000))   # ~5 MB
    results = engine.score([LoglikelihoodRequest("s", "the paper " * 2000, review), LoglikelihoodRequest("s", "", review)])
    check(all(r.truncated for r in results), "not flagged as truncated")
    check(results[0].n_tokens == results[1].n_tokens == engine.window // 2, "the two terms score different tokens")
    check(engine.stats.padded_tokens <= engine.stats.batches * engine.window, "a batch wider than the window")


def _tiny_model(root: Path):
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["[UNK]", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>", "the", "model", "is", "tested", "on",
             "data", "paper", "s"]
    raw = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]", eos_token="<|end|>",
                                                     pad_token="<|end|>")
    tokenizer.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
                               "{% if add_generation_prompt %}<|assistant|> {% endif %}")
    config = transformers.LlamaConfig(vocab_size=len(words), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                                      eos_token_id=1, pad_token_id=1, bos_token_id=1)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval(), tokenizer


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def unreachable_llm(root: Path) -> None:
    from tasks.core.config import LLMConfig
    from tasks.core.errors import UnreachableError
    from tasks.lm.openai_api import OpenAILM
    from tasks.lm.types import ChatRequest

    url = f"http://127.0.0.1:{_closed_port()}/v1"
    lm = OpenAILM(LLMConfig(backend="openai", model="m", base_url=url, api_key_env="", max_retries=2,
                            use_batches=False, retry_max_seconds=0.2))
    started = time.monotonic()
    try:
        lm.generate([ChatRequest("s", f"u{i}", 8) for i in range(4)])
    except UnreachableError as error:
        check(url.split("/v1")[0] in str(error) and "\n" not in str(error), f"message {error}")
    else:
        raise Broken("no error for a dead address")
    check(time.monotonic() - started < 60, "slower than a minute")


def killed_run(root: Path) -> None:
    (root / "pipelines.toml").write_text(
        "[paths]\ndata_dir = 'data'\n[ingest]\npdf = false\n[pipelines.s]\nsource = 'synthetic'\n"
        "venues = ['GREBench.cc/2025/Demo']\nstages = ['ingest', 'curate', 'materialize']\n"
        "[pipelines.s.synthetic]\nn_papers = 6\npdfs = false\n")
    kill_once_serving([sys.executable, "-m", "flows.cli.main", "run", "s", "-c", str(root / "pipelines.toml")],
                      root, ENV, "the run")


def _children(pid: int) -> list[int]:
    out = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    return out


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False



def kill_once_serving(args: list[str], root: Path, env: dict[str, str], what: str) -> None:
    """Start `args`, kill -9 it once it has started Prefect's server, and check the server goes too."""
    proc = subprocess.Popen(args, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    servers: list[int] = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None and not servers:
        servers = [p for p in _children(proc.pid) if b"create_app" in _cmdline(p)]
        time.sleep(0.2)
    check(bool(servers), "no server seen")
    proc.kill()
    proc.wait()
    until = time.monotonic() + 15
    while time.monotonic() < until and any(_alive(p) for p in servers):
        time.sleep(0.2)
    check(not any(_alive(p) for p in servers), f"the Prefect server outlived {what}")

def truncated_pdf(root: Path) -> None:
    from tasks.core.config import Config, IngestConfig
    from tasks.stages.ingest.fetch import ingest_venue
    from tasks.testing.openreview_server import serve_venues
    from tasks.testing.synthetic import make_venue

    venue = "GREBench.cc/2025/Demo"
    cfg = Config(root=root, ingest=IngestConfig(page_size=5, backoff_seconds=0.01, max_backoff_seconds=0.05,
                                                timeout_seconds=5, max_retries=2, pdf=True))
    with serve_venues([make_venue(venue, n_papers=6, bad_cases=False)], page_limit=5) as server:
        ingest_venue(venue, cfg, root / "out", server.v2_url)
        pdf = sorted((root / "out" / "pdfs").glob("*.pdf"))[0]
        whole = pdf.read_bytes()
        pdf.write_bytes(whole[: len(whole) // 3])
        ingest_venue(venue, cfg, root / "out", server.v2_url)
    check(pdf.read_bytes() == whole, "not fetched again")


def _namespace(mount: str, folder: Path, command: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o {mount} tmpfs {folder} && {command}"],
                          cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300)


def full_disk_and_read_only(root: Path) -> None:
    from tasks.core.config import load_config
    from tasks.stages.materialize.build import build_database

    path = built_project(root, "data/{pipeline}/grebench.duckdb")
    build_database(load_config(path).for_pipeline("t"), "t")
    out = root / "out"
    out.mkdir()
    for mount, needle, code in (("ro", "not writable", 2), ("size=8k", "the disk is full", 1)):
        for command in ("site --out", "report --out-dir"):
            done = _namespace(mount, out, f"{sys.executable} -m flows.cli.main {command} {out / 'x'} -c {path}", root)
            one_error_line(done, code, needle)


def reviews_files(root: Path) -> None:
    import polars as pl

    from tasks.stages.validate.reviews_file import ReviewsFileError, load_reviews_file

    base = {"paper_id": ["p1", "p2"], "reviewer": ["a", "b"], "review": ["clear", "vague"]}
    for column, values in (("review", [["x"], ["y"]]), ("review", [{"a": 1}, {"a": 2}]), ("review", [b"x", b"y"]),
                           ("quality", [1.0, float("nan")]), ("quality", [float("inf"), 1.0])):
        path = root / "r.parquet"
        pl.DataFrame({**base, column: values}).write_parquet(path)
        try:
            load_reviews_file(path)
        except ReviewsFileError as error:
            check("\n" not in str(error), "more than one line")
        else:
            raise Broken(f"{column} = {values!r} accepted")


SLOT_HOLDER = """
import sys, time
from pathlib import Path
from tasks.core.slots import SlotLimit, holding_slot
with holding_slot(SlotLimit(Path(sys.argv[1]), "grebench-eval-lm", 1, 5.0)):
    print("holding", flush=True)
    time.sleep(600)
"""


def killed_slot_holder(root: Path) -> None:
    """A process killed while it holds the evaluation-LM slot frees it; a wait is bounded
    and names a live holder's pid in one line."""
    from tasks.core.slots import SlotLimit, SlotTimeout, holding_slot

    child = subprocess.Popen([sys.executable, "-c", SLOT_HOLDER, str(root)], cwd=ROOT, env=ENV,
                             stdout=subprocess.PIPE, text=True)
    try:
        check(child.stdout.readline().strip() == "holding", "the holder did not take the slot")
        try:
            with holding_slot(SlotLimit(root, "grebench-eval-lm", 1, 0.5)):
                raise Broken("a held slot was taken twice")
        except SlotTimeout as error:
            check(f"pid={child.pid}" in str(error) and "\n" not in str(error), f"the wait said {error}")
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        started = time.monotonic()
        with holding_slot(SlotLimit(root, "grebench-eval-lm", 1, 5.0)):
            check(time.monotonic() - started < 1.0, "the slot of a killed holder was not free at once")
    finally:
        child.kill()
        child.wait(timeout=30)


def option_edges(root: Path) -> None:
    """Options far outside what they can mean are one line, exit 2."""
    path = small_db(root)
    for args, needle in ((["query", "select 1", "--timeout", "inf"], "--timeout"),
                         (["query", "select 1", "--timeout", "1e308"], "--timeout"),
                         (["query", "select 1", "--max-rows", "-1"], "--max-rows"),
                         (["schedule", "--dry-run", "--on", "0001-01-01"], "--on"),
                         (["schedule", "--dry-run", "--on", "9999-12-31"], "--on"),
                         (["export", "-p", "t", "--out", str(path)], "--out"),
                         (["export", "-p", "t", "--out", str(path / "under")], "--out"),
                         (["export", "-p", "t", "--out", "/proc/grebench-export"], "--out"),
                         (["submit", "--reviews", str(path), "--name", "a" * 300, "--cutoff", "2024-01-01"],
                          "at most 100")):
        one_error_line(cli([*args, "-c", str(path)], root), 2, needle)


def submitted_rows(root: Path) -> None:
    """Rows no parser should choke on are rejects of their own, in JSON Lines and CSV."""
    from tasks.stages.generate.submitted_file import read_rows

    jsonl = root / "r.jsonl"
    jsonl.write_text("\n".join(["[" * 100_000, '{"paper_id": "P", "review": "x", "rating": ' + "9" * 5001 + "}",
                                '{"paper_id": "P", "review": "x", "rating": NaN}']) + "\n")
    rules = [r["rule"] for r in read_rows(jsonl).rejects]
    check(rules == ["bad_json", "bad_json", "bad_rating"], f"JSON Lines rejects {rules}")
    csv = root / "r.csv"
    csv.write_text(f"paper_id,review\nP1,\"{'word ' * 2_000_000}\"\nP2,short\n")
    check(len(read_rows(csv).rows) == 2, "a 10 MB CSV field refused more than its row")


@contextlib.contextmanager
def _second_server(root: Path, first_out: str, same_port: bool = False) -> Iterator[tuple[Callable[[Path], Any], Any]]:
    """The demo venue ingested from a first server (6 papers) into root/first_out, then a second server serving
    8 other papers (on the first one's port with `same_port`): (ingest from it into a folder, the server)."""
    from urllib.parse import urlsplit

    from tasks.core.config import Config, IngestConfig
    from tasks.stages.ingest.fetch import ingest_venue
    from tasks.testing.openreview_server import serve_venues
    from tasks.testing.synthetic import make_venue

    venue = "GREBench.cc/2025/Demo"
    cfg = Config(root=root, ingest=IngestConfig(page_size=5, pdf=False, timeout_seconds=5, backoff_seconds=0.01,
                                                max_retries=1))
    with serve_venues([make_venue(venue, n_papers=6)], page_limit=5) as first:
        check(ingest_venue(venue, cfg, root / first_out, first.v2_url).papers == 6, "the first server's papers")
    port = urlsplit(first.v2_url).port if same_port else 0
    with serve_venues([make_venue(venue, n_papers=8, seed=3)], page_limit=5, port=port) as second:
        yield (lambda out: ingest_venue(venue, cfg, out, second.v2_url)), second


def raw_cache_of_another_source(root: Path) -> None:
    """Pages one server (or synthetic settings) wrote are never read for another source."""
    with _second_server(root, "a") as (ingest, _):
        result = ingest(root / "b")
    check(result.papers == 8 and result.pages_cached == 0, f"read another source's pages: {result}")


def same_port_other_server(root: Path) -> None:
    """A second server on the first one's address gets its own pages; a rerun asks it once what it serves."""
    with _second_server(root, "out", same_port=True) as (ingest, second):
        result = ingest(root / "out")
        check(result.papers == 8 and result.pages_cached == 0, f"served the first server's pages: {result}")
        calls = len(second.log)
        again = ingest(root / "out")
        asked = [r.params.get("limit") for r in second.log[calls:]]
    check(again.papers == 8 and again.pages_fetched == 0 and asked == ["5"],
          f"a rerun asked {asked} and fetched {again.pages_fetched} pages")
    check(len(list((root / "data" / "raw").rglob("v2.replaced-*"))) == 1, "the old cache was not kept aside")


def hidden_text_kinds(root: Path) -> None:
    """Text at 1% opacity, #EEEEEE, under a later white box or image, a page of only invisible text:
    listed and stripped; grey captions, a scan's OCR layer and text on a white image are kept."""
    from tasks.stages.ingest.pdf import extract_pdfs
    from tests.stages.ingest.test_pdf_hidden import PLANTED, pdf

    (root / "subtle.pdf").write_bytes(pdf(subtle=True, injection_page=True))
    (root / "scan.pdf").write_bytes(pdf(invisible_only=True, scan=True))
    (root / "clean.pdf").write_bytes(pdf())
    texts, rejects = extract_pdfs(root, ["subtle", "scan", "clean"], workers=2)
    check(rejects.is_empty(), f"rejects {rejects.to_dicts()}")
    rows = {row["paper_id"]: row for row in texts.iter_rows(named=True)}
    found = sorted((h["page"], h["reason"], h["text"]) for h in rows["subtle"]["hidden"])
    wanted = sorted((1, reason, text) for reason, text in PLANTED)
    check(found[:-1] == wanted and found[-1][:2] == (2, "invisible"), f"hidden {found}")
    check(not any(text in rows["subtle"]["text"] for _, text in PLANTED) and "clear accept" not in rows["subtle"]["text"],
          "hidden text reached the paper's text")
    check(rows["scan"]["hidden"] == [] and "sparse attention" in rows["scan"]["text"], "the OCR layer was hidden")
    check(rows["clean"]["hidden"] == [] and rows["subtle"]["text"] == rows["clean"]["text"], "visible text was lost")


def _completions(url: str, **settings):
    from tasks.core.config import LLMConfig
    from tasks.lm.completions import CompletionsLM

    cfg = LLMConfig(backend="openai", api="completions", model="served-model", tokenizer="smollm2",
                    base_url=url, api_key_env="", batch_size=4, max_in_flight=2, **settings)
    return CompletionsLM(cfg, sleep=time.sleep, backoff_seconds=0.05)


def silent_completions_server(root: Path) -> None:
    """A completions server that accepts and never answers stops the stage within its bound."""
    from tasks.core.errors import UnreachableError
    from tasks.lm.types import LoglikelihoodRequest
    from tasks.testing.local_http import silent_server

    with silent_server() as url:
        lm = _completions(f"{url}/v1", timeout_seconds=0.5, max_retries=100, retry_budget_seconds=2.0)
        check(lm.tokenizer is not None, "no tokenizer")
        started = time.monotonic()
        try:
            lm.loglikelihood([LoglikelihoodRequest("You read reviews.", "Is it novel?", "Yes")])
        except UnreachableError as error:
            check(url in str(error) and "\n" not in str(error), f"the line {error}")
        else:
            raise Broken("a silent server gave log-likelihoods")
    check(time.monotonic() - started < 30, "not stopped within 30 s")


def _bad_answers(faults: tuple[str, ...]) -> None:
    from tasks.lm.completions import CompletionsError
    from tasks.lm.types import LoglikelihoodRequest
    from tasks.testing.completions import FixedCompletions
    from tasks.testing.openai_server import OpenAIServer

    requests = [LoglikelihoodRequest("You read reviews.", f"Review {i}: the method is new.", "Yes") for i in range(3)]
    for fault in faults:
        with OpenAIServer(completions=FixedCompletions(value=5e-5)) as server:
            lm = _completions(server.base_url, max_retries=0)
            check(len(lm.loglikelihood(requests[:2])) == 2, "a good answer refused")
            server.malformed_next(fault, route="completions")
            try:
                lm.loglikelihood(requests[2:])
            except CompletionsError as error:
                line = str(error)
                check(f"{server.base_url}/completions:" in line and "\n" not in line and "/v1/v1" not in line,
                      f"{fault}: the line {line}")
            else:
                raise Broken(f"{fault}: taken as a score")


def impossible_logprobs(root: Path) -> None:
    """NaN, -inf, positive log-probabilities and one value too many are one CompletionsError line."""
    _bad_answers(("nan", "neg_inf", "positive", "extra_value"))


def completions_html_json(root: Path) -> None:
    """A 200 that is an HTML page or invalid JSON is one CompletionsError line naming the server."""
    _bad_answers(("html", "bad_json"))


def flaky_chat_server(root: Path) -> None:
    """A server failing every other request stops the stage after `retry_total_seconds` in all."""
    from tasks.core.config import LLMConfig
    from tasks.core.errors import UnreachableError
    from tasks.lm.openai_api import OpenAILM
    from tasks.lm.types import ChatRequest
    from tasks.testing.local_http import Fault
    from tasks.testing.openai_server import OpenAIServer

    class EveryOtherFails(OpenAIServer):
        def _arrived(self, route, body=None):
            super()._arrived(route, body)
            return Fault(503) if route == "chat" and self.counts[route] % 2 else None

    os.environ["GREBENCH_SOAK_KEY"] = "sk-soak"
    with EveryOtherFails() as server:
        lm = OpenAILM(LLMConfig(backend="openai", model="m", base_url=server.base_url, api_key_env="GREBENCH_SOAK_KEY",
                                use_batches=False, max_in_flight=1, max_retries=3, retry_budget_seconds=0.5,
                                retry_total_seconds=0.5), sleep=time.sleep, backoff_seconds=0.02)
        started = time.monotonic()
        try:
            lm.generate([ChatRequest("s", "Rewrite the review.", 8) for _ in range(200)])
        except UnreachableError as error:
            check("retry_total_seconds" in str(error) and "\n" not in str(error), f"the line {error}")
        else:
            raise Broken("200 requests on a flaky server, never stopped")
    check(time.monotonic() - started < 60, "not stopped within a minute")


def concurrent_submits(root: Path) -> None:
    """Two submits of one new name at once: one wins, the other says so in one line."""
    from tasks.testing.anthropic_server import AnthropicServer, heuristic_responder

    def slow(params: dict) -> str:
        time.sleep(1.0)
        return heuristic_responder(params)

    config = submit_project(root)
    env = {**ENV, "ANTHROPIC_API_KEY": "fake-soak-key"}
    with AnthropicServer(slow) as server:
        env["ANTHROPIC_BASE_URL"] = server.url
        children = [subprocess.Popen([sys.executable, "-m", "flows.cli.main", "submit", "--name", "agent", "--cutoff",
                                      "2024-03-01", "--no-score", "--reviews", str(root / f"{n}.jsonl"), "-c",
                                      str(config)], cwd=root, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True) for n in ("a", "b")]
        results = [(c.wait(timeout=300), *c.communicate()) for c in children]
    check(sorted(code for code, _, _ in results) == [0, 2], f"exits {[(c, e[-200:]) for c, _, e in results]}")
    loser = next(err for code, _, err in results if code == 2)
    check(loser.count("\n") == 1 and loser.startswith("error: ") and "Traceback" not in loser, f"loser said {loser!r}")
    from tasks.core.config import load_config
    from tasks.core.submitted import submission_folders

    folders = [f.name for f in submission_folders(load_config(config).for_pipeline("t"), "t")]
    check(folders == ["agent"], f"submissions {folders}")


def killed_submit(root: Path) -> None:
    """Kill -9 of `grebench submit` inside its flows takes its Prefect server along; a
    resubmission then finishes."""
    from tasks.testing.anthropic_server import AnthropicServer

    config = submit_project(root)
    env = {**ENV, "ANTHROPIC_API_KEY": "fake-soak-key", "PREFECT_HOME": str(root / "prefect")}
    with AnthropicServer() as server:
        env["ANTHROPIC_BASE_URL"] = server.url
        args = [sys.executable, "-m", "flows.cli.main", "submit", "--name", "agent", "--cutoff", "2024-03-01",
                "--reviews", str(root / "a.jsonl"), "-c", str(config)]
        kill_once_serving(args, root, env, "the submit")
        again = subprocess.run([*args, "--replace"], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    check(again.returncode == 0, f"the resubmission: exit {again.returncode}: {again.stderr[-300:]}")


# ---- the hostile-user round: forms, credentials, PDF bombs, trickling servers, signals, inputs ----------
def neurips_form_labels(root: Path) -> None:
    """NeurIPS 2024 / 2025 forms as their invitations label them derive their hand tables exactly."""
    from tasks.core.config import load_config
    from tasks.stages.ingest.review_form import Option, map_ratings
    from tasks.testing.synthetic import NEURIPS2024_RATINGS
    from tests.stages.ingest.test_hardening_forms import NEURIPS2025_LABELS

    tables = load_config(ROOT / "pipelines.toml").venues
    scale = [1, 3, 5, 6, 8, 10]
    for venue, labels in (("NeurIPS.cc/2024/Conference", NEURIPS2024_RATINGS.values()),
                          ("NeurIPS.cc/2025/Conference", NEURIPS2025_LABELS)):
        got, _ = map_ratings(venue, "rating", [Option(float(x.split(":")[0]), x) for x in labels], scale)
        check(got == tables[venue].rating_map, f"{venue}: derived {got}")


def token_with_line_break(root: Path) -> None:
    """A token with a line break (or a non-ASCII character) is one line that never shows it."""
    config = root / "pipelines.toml"
    config.write_text((ROOT / "pipelines.toml").read_text())
    for token in ("tokHEAD-5d1f0c9a7b\ntokTAIL-e3a94b2c61", "tokHEAD-5d1f0c9a7b\u00e9tokTAIL-e3a94b2c61"):
        done = cli(["login", "--check", "-c", str(config)], root, env={"OPENREVIEW_TOKEN": token})
        one_error_line(done, 2, "OPENREVIEW_TOKEN holds")
        check("tokHEAD" not in done.stderr + done.stdout and "tokTAIL" not in done.stderr + done.stdout,
              "the token was printed")


def pdf_bombs(root: Path) -> None:
    """A text bomb, a page bomb and a slow read are rejects with their limit; the good paper is read."""
    from tasks.stages.ingest.pdf import PdfLimits, extract_pdfs
    from tests.stages.ingest.test_hardening_pdf import page_bomb, text_bomb
    from tests.stages.ingest.test_pdf import NUMBERED, make_pdf

    (root / "bomb.pdf").write_bytes(text_bomb(2_000_000))
    (root / "pages.pdf").write_bytes(page_bomb(3000))
    (root / "good.pdf").write_bytes(make_pdf(NUMBERED))
    texts, rejects = extract_pdfs(root, ["bomb", "pages", "good"], workers=2,
                                  limits=PdfLimits(memory_mb=600, seconds=20, max_pages=500))
    check(texts["paper_id"].to_list() == ["good"], f"texts {texts['paper_id'].to_list()}")
    check(sorted(rejects["rule"]) == ["pdf_over_limit", "pdf_over_limit"], f"rejects {rejects.to_dicts()}")


def trickling_server(root: Path) -> None:
    """A server answering at once, then a byte every 0.3 s: the stage stops within its bounds."""
    from tasks.core.config import LLMConfig
    from tasks.core.errors import UnreachableError
    from tasks.lm.openai_api import OpenAILM
    from tasks.lm.types import ChatRequest
    from tasks.testing.local_http import trickling_server as trickle

    os.environ.setdefault("SOAK_KEY", "soak-key")
    with trickle(0.3) as url:
        lm = OpenAILM(LLMConfig(backend="openai", model="m", base_url=f"{url}/v1", api_key_env="SOAK_KEY",
                                timeout_seconds=0.5, max_retries=100, retry_max_seconds=0.05,
                                retry_budget_seconds=2.0, use_batches=False), sleep=time.sleep, backoff_seconds=0.05)
        started = time.monotonic()
        try:
            lm.generate([ChatRequest("You review papers.", "Review this.", 64)])
        except UnreachableError:
            pass
        else:
            raise Broken("no stop")
    check(time.monotonic() - started < 10, f"took {time.monotonic() - started:.1f} s")


def signal_during_stage(root: Path) -> None:
    """SIGTERM to a stage stuck on a silent OpenReview server: exit 143 within 10 s, one line."""
    listener = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    config = root / "pipelines.toml"
    config.write_text(shared_tables() + ingest_pipeline("stuck", "ICLR.cc/2025/Conference", url, timeout_seconds=3600))
    proc = subprocess.Popen([sys.executable, "-m", "flows.cli.main", "run", "stuck", "-c", str(config)], cwd=root,
                            env={**ENV, "PREFECT_HOME": str(root / "prefect"), "OPENREVIEW_TOKEN": "tok-soak"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        listener.settimeout(240)
        connection, _ = listener.accept()
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=60)
        check(proc.returncode == 143 and time.monotonic() - sent < 10, f"exit {proc.returncode} after "
              f"{time.monotonic() - sent:.1f} s: {err[-300:]}")
        check("error: stopped (SIGTERM)" in err, f"no line: {err[-300:]}")
        connection.close()
    finally:
        listener.close()
        if proc.poll() is None:
            proc.kill()


def full_disk_polars(root: Path) -> None:
    """polars' own 'No space left on device (os error 28)' is the one line of a full disk."""
    import polars as pl

    from flows.cli.failures import situation

    try:
        pl.DataFrame({"a": list(range(100_000))}).write_parquet("/dev/full")
    except Exception as error:  # noqa: BLE001 - whatever polars raises must read as a full disk
        line = situation(error)
        check(line is not None and line.startswith("the disk is full"), f"situation {line!r}")
    else:
        raise Broken("a write to /dev/full succeeded")


def login_check_server_error(root: Path) -> None:
    """`login --check` answered 431 by the server is an error, never "logged in"."""
    from tasks.testing.openreview_server import Fault, Policy, serve_venues
    from tasks.testing.synthetic import make_venue

    with serve_venues([make_venue("ICLR.cc/2025/Conference", n_papers=2, bad_cases=False)],
                      policy=Policy.today(limits={})) as server:
        config = root / "pipelines.toml"
        config.write_text(shared_tables() + ingest_pipeline("refresh", "ICLR.cc/{year}/Conference", server.v1_url,
                                                            server.v2_url, max_retries=0))
        server.inject(Fault("5xx", times=5, endpoint="profiles", status=431))
        done = cli(["login", "--check", "-c", str(config)], root, env={"OPENREVIEW_TOKEN": server.issue_token()})
    one_error_line(done, 2, "answered 431")
    check("logged in" not in done.stdout, "said logged in")


def impossible_logprob_sum(root: Path) -> None:
    """Finite log-probabilities summing to -inf (every value -1.7e308) are refused, not a score."""
    from tasks.lm.completions import CompletionsError
    from tasks.testing.completions import FixedCompletions
    from tasks.testing.openai_server import OpenAIServer
    from tests.lm.test_lm_completions import REQUESTS, served

    with OpenAIServer(completions=FixedCompletions(value=-1.7e308)) as server:
        try:
            served(server, max_retries=0).loglikelihood(REQUESTS[:1])
        except CompletionsError as error:
            check("sum to -inf" in str(error), str(error))
        else:
            raise Broken("a result came back")


def one_line_inputs(root: Path) -> None:
    """plan --gap 1e-300 / 1e-8 / 1e-12 and extends = ["demo", "full"]: one line each, no traceback."""
    from tests.cli.test_hardening_inputs import scores_database

    scores_database(root)
    for gap in ("1e-300", "1e-8", "1e-12"):
        one_error_line(cli(["plan", "--gap", gap, "-c", str(root / "pipelines.toml"), "-p", "t"], root), 2,
                       "more than 10,000,000 papers")
    (root / "ext.toml").write_text("[pipelines.demo]\nvenues = ['T.cc/2025/Conference']\nstages = ['materialize']\n"
                                   "[pipelines.both]\nextends = ['demo', 'full']\n")
    one_error_line(cli(["pipelines", "-c", str(root / "ext.toml")], root), 2, "name one pipeline as a string")


def hostile_form_labels(root: Path) -> None:
    """Escape sequences, forged lines and a 1 MB label in a served form: printed as cut, clean lines."""
    from tasks.testing.openreview_server import serve_venues
    from tasks.testing.synthetic import make_venue
    from tests.stages.ingest.test_hardening_forms import HOSTILE, v2_invitation

    labels = ["1: reject \x1b[2J\x07", "2: reject\nerror: forged", "3: accept " + "x" * 1_000_000]
    with serve_venues([make_venue(HOSTILE, n_papers=2, bad_cases=False, revisions=False)]) as server:
        server.invitation = lambda api, ident: v2_invitation(HOSTILE, labels)
        (root / "pipelines.toml").write_text((ROOT / "pipelines.toml").read_text())
        done = cli(["venues", "--form", HOSTILE, "--url", server.v2_url, "-c", str(root / "pipelines.toml")], root,
                   env={"OPENREVIEW_TOKEN": server.issue_token()})
    check(done.returncode == 0, done.stderr[-300:])
    lines = done.stdout.splitlines()
    check("\x1b" not in done.stdout and not [x for x in lines if x.startswith("error:")], "raw label printed")
    check(max(map(len, lines)) < 600, "a label printed uncut")


def dry_run_offline(root: Path) -> None:
    """`schedule --dry-run` against a server that would hang: no request, no folder."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    config = root / "pipelines.toml"
    config.write_text(shared_tables() + ingest_pipeline("refresh", "ICLR.cc/{year}/Conference", url,
                                                        stages=("ingest", "curate")))
    try:
        done = cli(["schedule", "--dry-run", "--on", "2025-12-15", "-c", str(config)], root,
                   env={"PREFECT_HOME": str(root / "prefect")})
        check(done.returncode == 0, done.stderr[-300:])
        try:
            listener.accept()
            raise Broken("the dry run connected")
        except TimeoutError:
            pass
    finally:
        listener.close()
    check(not (root / "data").exists(), "the dry run made data/")


def leaderboard_recompute(root: Path) -> None:
    """Two recomputations of the leaderboard give the human row's flag columns bit for bit."""
    import numpy as np
    import polars as pl

    from tests.sql.test_leaderboard_determinism import recompute

    rng = np.random.default_rng(int(time.time()))
    n = 400_000
    papers = rng.integers(0, 8, n)
    scores = pl.DataFrame({
        "metric": "gem", "eval_lm": "lm", "source": np.where(rng.random(n) < 0.9, "human", "m1"),
        "paper_id": [f"p{p}" for p in papers], "candidate": [f"c{p}-{c}" for p, c in zip(papers, rng.integers(0, 3, n), strict=True)],
        "reference": [f"r{r}" for r in rng.integers(0, 5000, n)],
        "score": rng.normal(0, 1, n) * 10.0 ** rng.integers(-3, 4, n)})
    flags = pl.DataFrame({"paper_id": [f"p{r % 8}" for r in range(5000)], "review_id": [f"r{r}" for r in range(5000)],
                          "flagged": rng.random(5000) < 0.2, "reason": None})   # staging.reference_flags' shape
    first = recompute(scores, flags)
    check(recompute(scores, flags) == first, "two recomputations differ")


SCENARIOS = scenarios(
    query_timeout, query_interrupt, query_huge_string, query_raise_limits, query_comment_first, random_wal,
    lock_timeout, two_pipelines, shared_database, hostile_names, quoted_suggestions, long_review,
    unreachable_llm, truncated_pdf, reviews_files, full_disk_and_read_only, killed_slot_holder, option_edges,
    submitted_rows, raw_cache_of_another_source, silent_completions_server, impossible_logprobs,
    completions_html_json, flaky_chat_server, concurrent_submits, neurips_form_labels, token_with_line_break,
    pdf_bombs, trickling_server, full_disk_polars, login_check_server_error, impossible_logprob_sum,
    one_line_inputs, hostile_form_labels, dry_run_offline, leaderboard_recompute, same_port_other_server,
    hidden_text_kinds, signal_during_stage, killed_run, killed_submit,
    slow=(signal_during_stage, killed_run, killed_submit,),
)


def main() -> None:
    from soak_breaks import BREAKS
    from soak_hostile import HOSTILE
    from soak_surfaces import SURFACES

    SCENARIOS.update(SURFACES)
    SCENARIOS.update(BREAKS)
    SCENARIOS.update(HOSTILE)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", nargs="*", choices=sorted(SCENARIOS))
    parser.add_argument("--skip-slow", action="store_true", help="leave out the kill -9 of a whole run")
    args = parser.parse_args()
    chosen = [n for n in (args.only or SCENARIOS) if not (args.skip_slow and SCENARIOS[n][1])]
    counts = {name: {"attempts": 0, "held": 0, "broken": 0} for name in chosen}
    failures: list[str] = []
    for round_ in range(1, args.rounds + 1):
        for name in chosen:
            root = Path(tempfile.mkdtemp(prefix=f"grebench-soak-{name}-"))
            started = time.monotonic()
            counts[name]["attempts"] += 1
            try:
                SCENARIOS[name][0](root)
            except Exception as error:  # noqa: BLE001 - a broken attempt is counted and named, the soak goes on
                counts[name]["broken"] += 1
                failures.append(f"round {round_} {name}: {type(error).__name__}: {str(error)[:300]}")
                outcome = "BROKEN"
            else:
                counts[name]["held"] += 1
                outcome = "held"
            finally:
                shutil.rmtree(root, ignore_errors=True)
            print(f"round {round_} {name:<24} {outcome:<6} {time.monotonic() - started:6.1f} s", flush=True)
    for line in failures:
        print(line, flush=True)
    total = {k: sum(c[k] for c in counts.values()) for k in ("attempts", "held", "broken")}
    print(json.dumps({**total, "rounds": args.rounds, "scenarios": counts}))


if __name__ == "__main__":
    main()
