"""What a full refresh costs: requests and tokens per stage, hours on a throughput, dollars at prices.

A refresh of `--venues` venues of `--submissions` submissions each is projected stage by stage:

    ingest      API requests at the configured logged-in pacing of [ingest]: the run's login, pages of
                notes with their replies (submissions / page_size, plus the group and the review invitation), the
                histories of edited reviews (`--edited-share` of the reviews; none where the venue
                hides its edit history, as ICLR and NeurIPS do since 2024), then for the papers
                later stages read ([ingest] pdf_scope, the benchmark sample by default) one PDF
                history and one PDF each. Hours are the requests of each endpoint over its rate, in
                the order ingest makes them; `pdfs_all_hours` is what fetching every submission's
                PDF would take (the order before PDFs were fetched for the sample only)
    papers      submissions x `--keep` (the share of papers curation keeps; default 16,000 of 46,199,
                Beyond Rating's figure for the same rules on NeurIPS 2022-25 and ICLR 2024-26)
    sample      the papers every stage after curation reads: per venue the first `--sample-size` of the
                curated papers (default: [curate] sample_size of `--pipeline`, "refresh-2026"), or all of
                them where fewer are kept. Preprocess, generate, score and validate are projected over
                the sample, as the refresh runs them (tasks/stages/curate/rules.py), not over every
                curated paper; `--sample-size 0` projects over every curated paper (a benchmark of
                the whole venue)
    preprocess  one chat request per human review of the sample (judgment lines) and, where a metric
                reads the ASSW synopsis (gem_s_assw), one per sampled paper
    generate    per (sampled paper, candidate LLM) one chat request for the review and one for its
                judgment lines (the generate stage extracts them; the run record counts them there).
                The paper given to a candidate is cut to its context less its answer
                (`--context-tokens`, `--candidate-output-tokens`), and a review is at most that answer
    score       GEM: per (candidate, reference) pair and GEM metric one conditional log-likelihood
                request, per (reference, metric) one marginal; candidates are the `--candidates` LLMs
                plus each human review left out in turn. Oracle cells (`--oracle-cells`): per pair one
                readout question per reference judgment line and per line of each of `--negatives`
                negatives, two answer requests (Yes, No) each. Judges (`--judges`): one chat request per
                candidate and judge
    validate    `max_papers` papers, one candidate each, every strategy: the GEM requests of each
                perturbed candidate again (the originals come from the score stage)

Token sizes come from the ICLR 2023 dev file (/work/shared/data/iclr2023_dev.parquet, when present:
reviews per paper, tokens per raw review, judgment lines per review, tokens per line, counted with
the embedded model's tokenizer; Llama 3's tokenizer gives about 10-15% fewer tokens for English) and
from the project's own prompts (each GEM prompt is rendered with the real chat template); the
abstract, ASSW synopsis and paper lengths are arguments. Without the dev file the stated defaults are
used and `measured_from` says so.

How the chat models behave is taken from a pilot run where one is given (`--pilot DIR`, the data folder
of a pipeline that ran preprocess and generate, e.g. a small rehearsal): the share of requests asked
again after an unusable answer, and the output tokens of an answer (a small model writes lines that
are dropped and runs to its `max_tokens`; a review answer may stop early). Without a pilot, every
request is answered once and an answer is as long as the lines and reviews it keeps.

Hours: evaluation-LM tokens (every prompt and continuation token of every request, since vLLM's V1
engine bypasses its prefix cache for requests that ask for prompt log-probabilities) divided by a
throughput in tokens/s: `--eval-tokens-per-s` (a figure for a GPU server), else this machine's local
engine measured in this run on real GEM requests (it shares prompt prefixes, so its figure is an
upper bound for a server that does not). On a shared machine the wall-clock rate understates the
engine; the JSON also gives the rate per CPU second of this process and the hours at that rate. Chat stages are priced per token at the configured prices
of `pipelines.toml` ([preprocess] for preprocessing, `--candidate-*-price` for the candidates, [score.oracle]
for the judges); `--gpu-hour-usd` prices the evaluation LM's hours. The last line is JSON.

    .venv/bin/python bench/cost/refresh_cost.py --submissions 15700 --candidates 10
    .venv/bin/python bench/cost/refresh_cost.py --submissions 15700 --candidates 10 --eval-tokens-per-s 40000 --gpu-hour-usd 2.5
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import polars as pl  # noqa: E402

from tasks.core.config import Config, load_config  # noqa: E402
from tasks.lm import LoglikelihoodRequest, ModelSpec, local_lm  # noqa: E402
from tasks.lm.loading import chat_ids, load_tokenizer  # noqa: E402
from tasks.metrics.gem import system_prompt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parents[0] / "shared" / "data" / "iclr2023_dev.parquet"
KEEP = 16_000 / 46_199
GEM_SYNOPSIS = {"gem_raw": None, "gem": None, "gem_s_abstract": "abstract", "gem_s_assw": "assw"}
ORACLE_PROMPT_TOKENS = 260       # the oracle's system prompt and question frame (tasks/prompts/*oracle*), SmolLM2 tokens
PREPROCESS_PROMPT_TOKENS = 700   # the judgment prompt with its frame, where it is not measured (gem_prompt_overhead)
JUDGE_PROMPT_TOKENS = 350
REVIEW_PROMPT_TOKENS = 300       # the review prompt (tasks/prompts/review-v1.md) with its frame


@dataclass
class Shape:
    """Sizes of one paper's texts, in tokens (measured from the dev file where it has them)."""

    reviews_per_paper: float = 3.9
    review_tokens: float = 640.0
    lines_per_review: float = 9.0
    line_tokens: float = 14.0
    measured_from: str = "defaults"


@dataclass
class Behaviour:
    """How the chat models answer, from a pilot run (`measure_behaviour`); the defaults: once, no waste."""

    preprocess_retry: float = 0.0             # requests asked again per review (a second try)
    judgment_answer_tokens: float | None = None   # output tokens of a judgments answer (None: the kept lines)
    generate_retry: float = 0.0               # review requests asked again per (paper, candidate)
    review_answer_tokens: float | None = None  # output tokens of a candidate's review answer
    measured_from: str = "defaults"


def measure_behaviour(data: Path) -> Behaviour:
    """The pilot's retry shares and answer lengths: its usage records (preprocess/usage.parquet,
    generate/usage.parquet) over the reviews and (paper, candidate) pairs it asked about."""
    usage = {stage: pl.read_parquet(data / stage / "usage.parquet") for stage in ("preprocess", "generate")}
    curated = pl.concat([pl.read_parquet(p) for p in sorted(data.glob("*/curate/papers.parquet"))])
    sampled = curated.filter(pl.col("in_benchmark"))["paper_id"]
    reviews = pl.concat([pl.read_parquet(p, columns=["paper_id", "review_id"])
                         for p in sorted(data.glob("*/curate/reviews.parquet"))])
    asked = reviews.filter(pl.col("paper_id").is_in(sampled.implode())).height
    judged = usage["preprocess"].filter(pl.col("purpose") == "judgments")
    written = usage["generate"].filter(pl.col("purpose").str.starts_with("generate:"))
    pairs = sampled.len() * max(written.height, 1)
    return Behaviour(preprocess_retry=judged["requests"].sum() / max(asked, 1) - 1,
                     judgment_answer_tokens=judged["output_tokens"].sum() / max(judged["requests"].sum(), 1),
                     generate_retry=written["requests"].sum() / max(pairs, 1) - 1,
                     review_answer_tokens=written["output_tokens"].sum() / max(written["requests"].sum(), 1),
                     measured_from=str(data))


@dataclass
class Stage:
    stage: str
    kind: str                      # "chat" (an LLM answers) or "eval_lm" (log-likelihoods / readout)
    requests: float = 0.0
    input_tokens: float = 0.0
    output_tokens: float = 0.0
    hours: float = 0.0
    cost_usd: float = 0.0

    def add(self, n: float, tokens_in: float, tokens_out: float = 0.0) -> None:
        self.requests += n
        self.input_tokens += n * tokens_in
        self.output_tokens += n * tokens_out


def measure_shape(path: Path) -> tuple[Shape, pl.DataFrame | None]:
    if not path.is_file():
        return Shape(), None
    data = pl.read_parquet(path)
    tokenizer = load_tokenizer()
    count = lambda texts: [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]  # noqa: E731
    lines = [[x.strip() for x in (j or "").splitlines() if x.strip()] for j in data["judgments_reference"]]
    flat = [x for ls in lines for x in ls]
    shape = Shape(reviews_per_paper=data.height / data["paper_id"].n_unique(),
                  review_tokens=sum(count(data["review"].to_list())) / data.height,
                  lines_per_review=len(flat) / data.height, line_tokens=sum(count(flat)) / len(flat),
                  measured_from=str(path))
    return shape, data


def gem_prompt_overhead(tokenizer: object) -> dict[str, int]:
    """Tokens of each GEM system prompt inside the real chat template (the review text added apart), and
    of the judgment and review prompts (tasks/prompts/<version>.md) in the same template."""
    out = {}
    for reads in ("raw", "judgments"):
        out[reads] = len(chat_ids(tokenizer, system_prompt(reads), ""))
    for role, version in (("preprocess", "judgments-v1"), ("review", "review-v1")):
        text = (ROOT / "tasks" / "prompts" / f"{version}.md").read_text(encoding="utf-8")
        out[role] = len(chat_ids(tokenizer, text, ""))
    return out


def local_throughput(data: pl.DataFrame | None, shape: Shape, n_pairs: int) -> dict[str, float]:
    """Prompt + continuation tokens per second of the local engine on real GEM-like requests."""
    if data is None:
        return {}
    papers = data.partition_by("paper_id", maintain_order=True)[: max(1, n_pairs // 6)]
    requests = []
    for paper in papers:
        texts = paper["judgments_reference"].to_list()
        for i, x in enumerate(texts):
            for j, y in enumerate(texts):
                if i != j and len(requests) < n_pairs:
                    requests.append(LoglikelihoodRequest(system_prompt("judgments"), x, y))
    lm = local_lm(ModelSpec())
    tokenizer = lm.tokenizer
    lm.loglikelihood(requests[:1])   # load the model and warm up (not timed)
    tokens = sum(len(chat_ids(tokenizer, r.system, r.user)) + len(tokenizer(r.continuation)["input_ids"]) + 1
                 for r in requests)
    start, cpu = time.perf_counter(), time.process_time()
    lm.loglikelihood(requests)
    wall, used = time.perf_counter() - start, time.process_time() - cpu
    return {"requests": len(requests), "tokens": tokens, "seconds": round(wall, 2), "cpu_seconds": round(used, 2),
            "tokens_per_s": round(tokens / wall, 1), "tokens_per_cpu_s": round(tokens / used, 1) if used else None}


def pipeline_config(args: argparse.Namespace) -> Config:
    """The config of `--pipeline` (its own tables over the shared ones), or the shared tables alone
    where `pipelines.toml` has no such pipeline."""
    cfg = load_config(args.config)
    base = args.pipeline.rsplit("-", 1)[0] if args.pipeline.rsplit("-", 1)[-1].isdigit() else args.pipeline
    return cfg.for_pipeline(args.pipeline) if base in cfg.pipelines else cfg


def sampled_papers(args: argparse.Namespace) -> float:
    """Papers the stages after curation read: per venue min(sample size, curated papers); a sample
    size of 0 reads every curated paper."""
    kept = args.submissions * args.keep
    return args.venues * (min(args.sample_size, kept) if args.sample_size else kept)


def ingest_plan(args: argparse.Namespace, reviews_per_paper: float) -> tuple[Stage, dict[str, float]]:
    """The ingest stage's requests and hours at [ingest]'s logged-in pacing (module docstring)."""
    cfg = pipeline_config(args)
    ingest, venues, n = cfg.ingest, args.venues, args.submissions
    pages = venues * (math.ceil(n / ingest.page_size) + 2) + 1   # + the group and form per venue, one login
    histories = venues * n * reviews_per_paper * args.edited_share
    kept = n * args.keep
    sample = min(args.sample_size, kept) if args.sample_size else kept
    per_venue = {"sample": sample, "curated": kept, "all": n}[ingest.pdf_scope]
    pdfs = venues * per_venue if ingest.pdf else 0
    pdf_histories = pdfs * args.pdf_history_share

    def hours(count: float, per_hour: float) -> float:
        return count / per_hour if per_hour else 0.0

    notes_rate, edits_rate = ingest.logged_in_requests_per_minute * 60, ingest.edits_per_minute * 60
    parts = {"pages_hours": hours(pages, notes_rate), "histories_hours": hours(histories + pdf_histories, edits_rate),
             "pdfs_hours": hours(pdfs, ingest.logged_in_pdfs_per_hour),
             "pdfs_all_hours": hours(venues * n, ingest.logged_in_pdfs_per_hour), "pdfs": pdfs,
             "pdfs_all": venues * n, "pdf_scope": ingest.pdf_scope}
    stage = Stage("ingest", "api")
    stage.add(pages + histories + pdf_histories + pdfs, 0)
    stage.hours = parts["pages_hours"] + parts["histories_hours"] + parts["pdfs_hours"]
    return stage, parts


def project(args: argparse.Namespace, shape: Shape, overhead: dict[str, int],
            behaviour: Behaviour | None = None) -> list[Stage]:
    """Requests and tokens of every stage after curation, over the sampled papers (module docstring)."""
    cfg = pipeline_config(args)
    how = behaviour or Behaviour()
    papers = sampled_papers(args)
    r, c = shape.reviews_per_paper, args.candidates
    judg_tokens = shape.lines_per_review * shape.line_tokens
    stages = {s: Stage(s, k) for s, k in (("preprocess", "chat"), ("generate", "chat"), ("score.gem", "eval_lm"),
                                          ("score.oracle", "eval_lm"), ("score.judges", "chat"),
                                          ("validate.gem", "eval_lm"))}
    # preprocess: judgments of every human review, one ASSW synopsis per paper where a metric reads it
    judgment_prompt = overhead.get("preprocess", PREPROCESS_PROMPT_TOKENS)
    review_prompt = overhead.get("review", REVIEW_PROMPT_TOKENS)
    judg_answer = how.judgment_answer_tokens if how.judgment_answer_tokens is not None else judg_tokens
    stages["preprocess"].add(papers * r * (1 + how.preprocess_retry), judgment_prompt + shape.review_tokens,
                             judg_answer)
    if "gem_s_assw" in cfg.score.metrics:
        stages["preprocess"].add(papers, judgment_prompt + args.paper_tokens, args.assw_tokens)
    # generate: one review per (paper, candidate LLM), the paper cut to the context less the answer,
    # then the judgment lines of each candidate review
    answer = min(shape.review_tokens if how.review_answer_tokens is None else how.review_answer_tokens,
                 args.candidate_output_tokens)
    paper = max(0, min(args.paper_tokens, args.context_tokens - args.candidate_output_tokens - review_prompt))
    stages["generate"].add(papers * c * (1 + how.generate_retry), review_prompt + paper, answer)
    stages["generate"].add(papers * c, judgment_prompt + answer, judg_answer)
    # score: GEM metrics, (C LLM + R human leave-one-out) candidates x the other human references
    pairs = papers * (c * r + r * (r - 1))
    gem = [m for m in cfg.score.metrics if m in GEM_SYNOPSIS]
    for metric in gem:
        reads = "raw" if metric == "gem_raw" else "judgments"
        text = shape.review_tokens if reads == "raw" else judg_tokens
        synopsis = {"abstract": args.abstract_tokens, "assw": args.abstract_tokens + args.assw_tokens,
                    None: 0}[GEM_SYNOPSIS[metric]]
        stages["score.gem"].add(pairs, overhead[reads] + synopsis + 2 * text + 1)       # conditional
        stages["score.gem"].add(papers * r, overhead[reads] + synopsis + text + 1)      # marginal, once per reference
    # oracle cells at statement level: per pair, lines of the reference and of each negative, Yes and No
    questions = pairs * shape.lines_per_review * (1 + args.negatives) * len(args.oracle_cells)
    stages["score.oracle"].add(2 * questions, ORACLE_PROMPT_TOKENS + judg_tokens + shape.line_tokens + 1)
    # judges: one rating per candidate and judge (synopsis, the references, the candidate)
    stages["score.judges"].add(papers * (c + r) * args.judges,
                               JUDGE_PROMPT_TOKENS + args.abstract_tokens + r * shape.review_tokens, 8)
    # validate: max_papers papers, one candidate, every strategy; GEM against the R-1 other references
    sample = min(cfg.validate.max_papers, papers)
    for metric in gem:
        reads = "raw" if metric == "gem_raw" else "judgments"
        text = shape.review_tokens if reads == "raw" else judg_tokens
        stages["validate.gem"].add(sample * len(cfg.validate.strategies) * (r - 1), overhead[reads] + 2 * text + 1)
    # prices: [preprocess] for preprocessing, the candidates' flags, [score.oracle] for the judges
    prices = {"preprocess": (cfg.preprocess.input_price_per_mtok, cfg.preprocess.output_price_per_mtok),
              "generate": (args.candidate_input_price, args.candidate_output_price),
              "score.judges": (cfg.score.oracle.input_price_per_mtok, cfg.score.oracle.output_price_per_mtok)}
    for stage in stages.values():
        if stage.kind == "chat":
            price_in, price_out = prices[stage.stage]
            stage.cost_usd = (stage.input_tokens * price_in + stage.output_tokens * price_out) / 1e6
    return [s for s in stages.values() if s.requests]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--submissions", type=int, default=15_700, help="submissions per venue (ICLR 2026: ~15,700)")
    parser.add_argument("--venues", type=int, default=1)
    parser.add_argument("--keep", type=float, default=KEEP, help="share of papers curation keeps")
    parser.add_argument("--candidates", type=int, default=10, help="candidate LLMs")
    parser.add_argument("--negatives", type=int, default=None, help="negatives per pair (default: [score] negatives)")
    parser.add_argument("--oracle-cells", default="tv_fvar_statement",
                        help="statement-level oracle cells scored, comma-separated ('' for none)")
    parser.add_argument("--judges", type=int, default=1, help="LLM judges rating each candidate (0: none)")
    parser.add_argument("--abstract-tokens", type=int, default=250)
    parser.add_argument("--assw-tokens", type=int, default=200)
    parser.add_argument("--paper-tokens", type=int, default=15_000, help="paper text given to ASSW and candidates")
    parser.add_argument("--context-tokens", type=int, default=8192, help="candidate context (paper cut to fit)")
    parser.add_argument("--candidate-output-tokens", type=int, default=2048,
                        help="a candidate's answer limit (max_tokens): its review's longest, kept free of the paper")
    parser.add_argument("--candidate-input-price", type=float, default=3.0, help="USD per million input tokens")
    parser.add_argument("--candidate-output-price", type=float, default=15.0, help="USD per million output tokens")
    parser.add_argument("--eval-tokens-per-s", type=float, default=None,
                        help="evaluation-LM throughput of a server (default: measure the local engine here)")
    parser.add_argument("--gpu-hour-usd", type=float, default=None, help="price of one evaluation-LM server hour")
    parser.add_argument("--measure-pairs", type=int, default=24, help="GEM requests timed on the local engine")
    parser.add_argument("--edited-share", type=float, default=0.0,
                        help="share of reviews whose history ingest reads (0: the venue hides edit histories)")
    parser.add_argument("--pdf-history-share", type=float, default=0.0,
                        help="share of fetched PDFs whose history is read (0: hidden, as at ICLR/NeurIPS since 2024)")
    parser.add_argument("--sample-size", type=int, default=None,
                        help="papers per venue the stages after curation read (default: [curate] sample_size "
                             "of --pipeline; 0: every curated paper)")
    parser.add_argument("--pipeline", default="refresh-2026",
                        help="the pipeline whose settings apply (a yearly one with its year)")
    parser.add_argument("--config", default=str(ROOT / "pipelines.toml"))
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--pilot", type=Path, default=None,
                        help="data folder of a pilot run (e.g. data/<pipeline>): retry shares and answer lengths")
    args = parser.parse_args()
    if args.submissions < 1 or args.venues < 1 or args.candidates < 0 or not 0 < args.keep <= 1:
        parser.error("--submissions and --venues must be positive, --candidates >= 0, 0 < --keep <= 1")
    if args.eval_tokens_per_s is not None and args.eval_tokens_per_s <= 0:
        parser.error("--eval-tokens-per-s must be positive")
    args.oracle_cells = [c for c in args.oracle_cells.split(",") if c.strip()]
    if args.sample_size is None:
        args.sample_size = pipeline_config(args).curate.sample_size
    if args.sample_size < 0:
        parser.error("--sample-size must be >= 0")
    if args.negatives is None:
        args.negatives = pipeline_config(args).score.negatives

    shape, data = measure_shape(Path(args.data))
    overhead = gem_prompt_overhead(load_tokenizer())
    measured = {} if args.eval_tokens_per_s else local_throughput(data, shape, args.measure_pairs)
    rate = args.eval_tokens_per_s or measured.get("tokens_per_s")
    behaviour = measure_behaviour(args.pilot) if args.pilot else Behaviour()
    stages = project(args, shape, overhead, behaviour)
    ingest, ingest_parts = ingest_plan(args, shape.reviews_per_paper)
    stages.insert(0, ingest)
    for stage in stages:
        if stage.kind == "eval_lm" and rate:
            stage.hours = stage.input_tokens / rate / 3600
            if args.gpu_hour_usd is not None:
                stage.cost_usd = stage.hours * args.gpu_hour_usd
    papers, sample = args.venues * args.submissions * args.keep, sampled_papers(args)
    print(f"papers after curation: {papers:,.0f} ({args.venues} x {args.submissions:,} x {args.keep:.3f}); "
          f"read after curation: {sample:,.0f} (sample size {args.sample_size or 'all'}); "
          f"{args.candidates} candidates; shape from {shape.measured_from}")
    print(f"evaluation LM: {rate:,.0f} tokens/s ({'given' if args.eval_tokens_per_s else 'local engine, measured'})"
          if rate else "evaluation LM: no throughput (no dev file to measure on; pass --eval-tokens-per-s)")
    print(f"ingest: {ingest_parts['pdfs']:,.0f} PDFs ({ingest_parts['pdf_scope']}) in {ingest_parts['pdfs_hours']:,.1f} h; "
          f"every submission's PDF would take {ingest_parts['pdfs_all_hours']:,.0f} h "
          f"({ingest_parts['pdfs_all_hours'] / 24:,.1f} days)")
    print(f"{'stage':<14}{'kind':<9}{'requests':>14}{'input tokens':>18}{'output tokens':>16}{'hours':>12}{'USD':>12}")
    for s in stages:
        print(f"{s.stage:<14}{s.kind:<9}{s.requests:>14,.0f}{s.input_tokens:>18,.0f}{s.output_tokens:>16,.0f}"
              f"{s.hours:>12,.1f}{s.cost_usd:>12,.0f}")
    eval_tokens = sum(s.input_tokens for s in stages if s.kind == "eval_lm")
    summary = {
        "papers": round(papers), "sampled_papers": round(sample), "sample_size": args.sample_size,
        "pipeline": args.pipeline, "candidates": args.candidates, "shape": asdict(shape),
        "behaviour": asdict(behaviour),
        "eval_lm_tokens_per_s": rate, "throughput_source": "given" if args.eval_tokens_per_s else "local_measured",
        "local_measurement": measured, "stages": [asdict(s) for s in stages],
        "ingest_hours": round(ingest.hours, 2), "ingest": {k: round(v, 2) if isinstance(v, float) else v
                                                          for k, v in ingest_parts.items()},
        "eval_lm_tokens": eval_tokens, "eval_lm_hours": round(eval_tokens / rate / 3600, 2) if rate else None,
        "eval_lm_hours_at_cpu_rate": (round(eval_tokens / measured["tokens_per_cpu_s"] / 3600, 2)
                                      if measured.get("tokens_per_cpu_s") else None),
        "chat_usd": round(sum(s.cost_usd for s in stages if s.kind == "chat"), 2),
        "eval_lm_usd": (round(sum(s.cost_usd for s in stages if s.kind == "eval_lm"), 2)
                        if args.gpu_hour_usd is not None and rate else None),
    }
    print(json.dumps(summary, default=lambda v: None if isinstance(v, float) and math.isnan(v) else v))


if __name__ == "__main__":
    main()
