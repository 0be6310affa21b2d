"""GEM's Table 2 reproduced: the paper's standardized mean differences beside the project's own.

The GEM paper (paper 000, section 4.2-4.3, Table 2 and its confidence intervals in Tables 4-5 of
appendix A.1) validates ten metrics on ICLR 2023 reviews under three degradations and three
manipulations. Its data is public (the GEM release, `task_iclr23/dataset/dataset_human_review{1,2,3}
.parquet`: one file per sampled reviewer, the GPT-4o judgments of each review beside it), so one
command can run the project's own validation workflow on the same papers and set its SMDs beside the
paper's:

* `release_files`: the release's three files from the download cache, fetched by URL when absent;
  or a local file or folder (the 200-paper dev file works offline);
* `release_reviews`: those files in the shape `grebench validate --reviews` reads (paper_id, reviewer,
  review, judgments[, abstract]), whichever of the known column names each file uses;
* `not_run`: the paper's metrics and strategies the run cannot measure, each with its reason;
* `side_by_side`: one row per (metric, strategy) of the paper: its SMD and whether it is significant
  in the paper's direction, the project's SMD with its 95% interval, its one-sided p-value and whether
  that is below alpha, and whether the two agree in sign and in significance.

Significance is one-sided in the paper's direction, as Table 2 marks its cells: a degradation's cell
counts when the score falls significantly (p < 0.05 for a decrease), a manipulation's when it rises
significantly. The paper's own cells count by their 95% interval (Tables 4 and 5 of appendix A.1)
lying wholly below 0 for a degradation, wholly above 0 for a manipulation.

Two workflows (`WORKFLOWS`): "algorithm1", GEM's Algorithm 1 as section 4.2 runs it (per paper one
seeded candidate review and the other reviews as its references; each strategy applied to the text
appendix D names: the raw review for deletion, completion and elongation, the judgments for the
rephrase; original and perturbed candidate turned into judgments by the same configured preprocessor,
the references keeping the release's GPT-4o judgments; raw-text metrics on raw text), and
"judgment-lines", a cheaper proxy (every review a candidate in turn, the deterministic strategies on the
release's judgment lines, which the raw-text metrics then read), whose name its output prints.

The paper's figures below are its Table 2 SMDs with the 95% intervals of Tables 4 and 5.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from tasks.core import damage
from tasks.report.common import download_once

RELEASE_REPO = "yx-lu/Benchmarking-LLMs--Judgments-with-No-Gold-Standard"
RELEASE_FILES = tuple(f"task_iclr23/dataset/dataset_human_review{k}.parquet" for k in (1, 2, 3))
RELEASE_URL = "https://github.com/{repo}/raw/main/{path}"   # resolves files kept in Git LFS too
DEFAULT_PAPERS = 300   # the paper's validation sample (section 4.2)
WORKFLOWS = {
    "algorithm1": "GEM Algorithm 1: one seeded candidate per paper, its other reviews the references; strategies "
                  "on the raw review (appendix D; the rephrase on the judgments, D.2.1); original and perturbed "
                  "candidate preprocessed by {preprocessor}, {references}",
    "judgment-lines": "PROXY judgment-lines (not the paper's workflow): every review a candidate in turn, the "
                      "deterministic strategies on the release's judgment lines, which the raw-text metrics read too",
}
# the paper's direction per strategy: a degradation must lower a metric, a manipulation must not raise it
KIND = {"sentence_deletion": "degradation", "deletion_completion": "degradation", "surface_report": "degradation",
        "rephrase": "manipulation", "rephrase_second": "manipulation", "meaningless_elongation": "manipulation"}

# the paper's column and row names -> the project's registry names
STRATEGIES = {"Sentence Deletion": "sentence_deletion", "Deletion & Completion": "deletion_completion",
              "Abstract-only Review": "surface_report", "GPT-4o Rephrase": "rephrase",
              "Llama3.1 Rephrase": "rephrase_second", "Meaningless Elongation": "meaningless_elongation"}
# a named proxy that may fill a paper's cell when the paper's own strategy is not run (its rows' perturber says so):
# the elongation without the LLM's summaries costs no decode
PROXIES = {"meaningless_elongation_proxy": "meaningless_elongation"}
METRICS = {"BLEU": "bleu", "ROUGE-L": "rouge_l", "BERTScore": "bertscore_minilm", "BARTS.-F1": "bartscore_f1",
           "BARTS.-prec.": "bartscore_precision", "BARTS.-recall": "bartscore_recall", "LMExaminer": "lm_examiner",
           "GEM-raw": "gem_raw", "GEM": "gem", "GEM-S": "gem_s_abstract"}

# (SMD, 95% low, 95% high) per paper metric, in the order of STRATEGIES
_PAPER = {
    "BLEU": [(-0.282, -0.346, -0.218), (0.016, -0.013, 0.046), (-0.692, -0.778, -0.607),
             (-0.975, -1.020, -0.930), (-0.920, -0.971, -0.870), (-0.165, -0.230, -0.101)],
    "ROUGE-L": [(-0.073, -0.122, -0.025), (0.091, 0.062, 0.121), (0.022, -0.054, 0.098),
                (0.028, 0.009, 0.047), (0.120, 0.080, 0.160), (-0.196, -0.241, -0.151)],
    "BERTScore": [(-0.100, -0.131, -0.069), (-0.188, -0.222, -0.155), (0.840, 0.769, 0.910),
                  (0.134, 0.113, 0.155), (0.063, 0.032, 0.093), (0.064, 0.042, 0.086)],
    "BARTS.-F1": [(0.401, 0.380, 0.422), (0.201, 0.184, 0.218), (0.394, 0.344, 0.445),
                  (0.130, 0.120, 0.140), (0.332, 0.299, 0.365), (-0.304, -0.308, -0.299)],
    "BARTS.-prec.": [(0.627, 0.595, 0.659), (0.317, 0.292, 0.343), (0.617, 0.536, 0.698),
                     (0.218, 0.204, 0.233), (0.541, 0.490, 0.593), (-0.439, -0.446, -0.433)],
    "BARTS.-recall": [(-0.017, -0.019, -0.016), (-0.016, -0.017, -0.014), (0.004, 0.001, 0.007),
                      (-0.027, -0.028, -0.027), (-0.028, -0.029, -0.027), (0.004, 0.004, 0.005)],
    "LMExaminer": [(-1.290, -1.343, -1.238), (-0.417, -0.472, -0.363), (0.715, 0.630, 0.799),
                   (0.187, 0.153, 0.221), (0.104, 0.060, 0.147), (0.105, 0.069, 0.140)],
    "GEM-raw": [(-0.123, -0.126, -0.120), (-0.126, -0.132, -0.121), (0.020, 0.017, 0.023),
                (-0.123, -0.126, -0.120), (-0.126, -0.132, -0.121), (0.020, 0.017, 0.023)],
    "GEM": [(-0.401, -0.448, -0.354), (-0.308, -0.358, -0.258), (-0.191, -0.261, -0.122),
            (-0.058, -0.090, -0.026), (-0.107, -0.143, -0.070), (-0.063, -0.097, -0.030)],
    "GEM-S": [(-0.409, -0.455, -0.362), (-0.206, -0.254, -0.158), (-0.566, -0.639, -0.492),
              (-0.046, -0.079, -0.013), (-0.114, -0.149, -0.078), (-0.070, -0.104, -0.036)],
}
PAPER_TABLE = pl.DataFrame(
    [{"paper_metric": label, "paper_strategy": column, "metric": METRICS[label], "strategy": STRATEGIES[column],
      "paper_smd": smd, "paper_low": low, "paper_high": high}
     for label, cells in _PAPER.items() for column, (smd, low, high) in zip(STRATEGIES, cells, strict=True)])

# column names the release files and the dev file use, first match wins
_ALIASES = {"paper_id": ("paper_id", "forum", "id", "paper"),
            "review": ("review", "review_text", "human_review", "content"),
            "judgments": ("judgments", "judgments_reference", "review_summary"),
            "abstract": ("abstract",)}


class ReleaseError(ValueError):
    """A release that cannot be read: one line naming the file and what it lacks."""


def release_files(release: Path | None, cache: Path, timeout_s: float = 120.0) -> list[Path]:
    """The release's Parquet files: `release` itself (a file, or a folder's *.parquet), else the three
    files of the GEM release in `cache`, each downloaded once by URL."""
    if release is not None:
        if release.is_dir():
            found = sorted(release.glob("*.parquet"))
            if not found:
                raise ReleaseError(f"{release}: no .parquet file in the folder")
            odd = [p for p in found if not p.is_file()]   # a FIFO would block the reader for ever
            if odd:
                raise ReleaseError(f"{odd[0]}: not a regular file (a pipe, a socket or a device): give Parquet files")
            return found
        if release.exists() and not release.is_file():
            raise ReleaseError(f"{release}: not a regular file (a pipe, a socket or a device): give a Parquet file")
        if not release.is_file():
            raise ReleaseError(f"{release}: no such file or folder")
        return [release]
    cache.mkdir(parents=True, exist_ok=True)
    out = []
    for path in RELEASE_FILES:
        target = cache / Path(path).name
        url = RELEASE_URL.format(repo=RELEASE_REPO, path=path)
        try:
            out.append(download_once(url, target, b"PAR1", "a Parquet file", timeout_s))
        except ValueError as error:
            raise ReleaseError(str(error)) from None
    return out


def _column(frame: pl.DataFrame, name: str, path: Path, required: bool = True) -> str | None:
    found = next((c for c in _ALIASES[name] if c in frame.columns), None)
    if found is None and required:
        raise ReleaseError(f"{path}: no {name} column (looked for {', '.join(_ALIASES[name])}; "
                           f"found: {', '.join(frame.columns)})")
    return found


def release_reviews(paths: Sequence[Path]) -> pl.DataFrame:
    """paper_id, reviewer, review, judgments[, abstract] of every review in the release files. A file
    without a reviewer column is one reviewer's file, numbered by the digits of its name
    (dataset_human_review2.parquet: reviewer 2)."""
    frames = []
    for path in paths:
        raw = damage.read_parquet(path, fix="give a Parquet file of the GEM release (or its shape)")
        picked = {name: _column(raw, name, path, required=name in ("paper_id", "review"))
                  for name in _ALIASES}
        for name in ("review", "judgments", "abstract"):
            kind = raw.schema[picked[name]] if picked[name] else pl.String
            if kind not in (pl.String, pl.Null, pl.Categorical):
                raise ReleaseError(f"{path}: column {picked[name]} ({name}) holds {kind}, not text")
        for column in (picked["paper_id"], "reviewer"):   # ids: one text or number a row, never a list
            kind = raw.schema.get(column, pl.String)
            if kind.is_nested() or kind == pl.Binary:
                raise ReleaseError(f"{path}: column {column} holds {kind}, not one id a row")
        if "reviewer" in raw.columns:
            reviewer = pl.col("reviewer").cast(pl.String)
        else:
            digits = re.findall(r"\d+", path.stem)
            if not digits:
                raise ReleaseError(f"{path}: no reviewer column and no reviewer number in the file name")
            reviewer = pl.lit(digits[-1])
        columns = [pl.col(picked["paper_id"]).cast(pl.String).alias("paper_id"), reviewer.alias("reviewer"),
                   pl.col(picked["review"]).cast(pl.String).alias("review")]
        columns += [pl.col(picked[n]).cast(pl.String).alias(n) if picked[n] else pl.lit(None, pl.String).alias(n)
                    for n in ("judgments", "abstract")]
        frames.append(raw.select(columns))
    reviews = pl.concat(frames).filter(pl.col("review").str.strip_chars().str.len_chars() > 0)
    return reviews.unique(["paper_id", "reviewer"], keep="first", maintain_order=True).sort("paper_id", "reviewer")


def sample_papers(reviews: pl.DataFrame, n: int, seed: int) -> pl.DataFrame:
    """The reviews of `n` papers with two reviews at least (a candidate needs a reference), drawn with `seed`."""
    counts = reviews.group_by("paper_id").len().filter(pl.col("len") >= 2).sort("paper_id")
    chosen = counts.sample(n=min(n, counts.height), seed=seed, shuffle=True)["paper_id"]
    return reviews.filter(pl.col("paper_id").is_in(chosen.implode()))


def not_run(metrics: Sequence[str], strategies: Sequence[str], reviews: pl.DataFrame,
            has_rephrase_llm: bool, metric_needs: dict[str, str]) -> dict[str, str]:
    """name -> why it cannot run here, for the asked metrics and strategies: `metric_needs` is each
    metric's conditioning (the registry's `conditioned_on`)."""
    out = {}
    has_abstract = "abstract" in reviews.columns and reviews["abstract"].is_not_null().any()
    for name in metrics:
        need = metric_needs.get(name, "none")
        if need == "paper":
            out[name] = "reads the paper's full text, which the release does not hold"
        elif need.startswith("abstract") and not has_abstract:
            out[name] = "is conditioned on the abstract, which the release file does not hold"
    if "surface_report" in strategies and not has_abstract:
        out["surface_report"] = "writes a review from the abstract alone, which the release file does not hold"
    if "rephrase_second" in strategies and not has_rephrase_llm:
        out["rephrase_second"] = "needs a second rephrasing LLM ([validate.rephrase_llm]; the paper used Llama-3.1)"
    return out


def significant(row: dict, alpha: float) -> bool | None:
    """Whether the project's change is significant in the paper's direction: the workflow's one-sided
    p-value (a fall for a degradation, a rise for a manipulation) below `alpha`; None without one."""
    p = row.get("p_value")
    return None if p is None or math.isnan(p) else bool(p < alpha)


def paper_significant(strategy: str, low: float, high: float) -> bool:
    """The paper's cell is significant in its direction: the 95% interval wholly below 0 for a
    degradation, wholly above 0 for a manipulation (Table 2's green and red cells)."""
    return high < 0 if KIND[strategy] == "degradation" else low > 0


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def side_by_side(validation: pl.DataFrame, skipped: dict[str, str], alpha: float) -> pl.DataFrame:
    """One row per cell of the paper's table: the paper's SMD and significance (`paper_significant`), the
    project's SMD with its 95% interval, one-sided p-value and significance (`significant`), the level the
    metric read and what perturbed it, and whether sign and significance agree; a cell that was not
    measured says why in `reason`, and a measured one what its validation row says (why some of its pairs are
    missing, say)."""
    ours: dict[tuple[str, str], dict] = {}
    for row in validation.iter_rows(named=True):   # the paper's strategy before its proxy
        ours.setdefault((row["metric"], row["strategy"]), row)
    for row in validation.iter_rows(named=True):
        if row["strategy"] in PROXIES:
            ours.setdefault((row["metric"], PROXIES[row["strategy"]]), row)
    rows = []
    for cell in PAPER_TABLE.iter_rows(named=True):
        paper_sig = paper_significant(cell["strategy"], cell["paper_low"], cell["paper_high"])
        got = ours.get((cell["metric"], cell["strategy"]))
        smd = got["smd"] if got is not None else None
        p = got["p_value"] if got is not None else None
        measured = smd is not None and not math.isnan(smd)
        # a measured cell keeps its row's reason too: why it has fewer pairs than papers (rewrites refused, say)
        reason = (skipped.get(cell["metric"]) or skipped.get(cell["strategy"]) or
                  ("not asked" if got is None else got.get("reason") or (None if measured else "no pairs")))
        sig = significant(got, alpha) if measured else None
        rows.append({**cell, "kind": KIND[cell["strategy"]], "paper_significant": paper_sig,
                     "smd": smd if measured else None,
                     "ci_low": _finite(got.get("ci_low")) if measured else None,
                     "ci_high": _finite(got.get("ci_high")) if measured else None,
                     "p_value": p if measured else None, "significant": sig,
                     "n": got["n"] if got is not None else None,
                     "level": got.get("level") if got is not None else None,
                     "perturber": got.get("perturber") if got is not None else None,
                     "sign_agrees": (math.copysign(1, smd) == math.copysign(1, cell["paper_smd"])) if measured else None,
                     "significance_agrees": (sig == paper_sig) if sig is not None else None,
                     "reason": reason})
    return pl.DataFrame(rows, schema_overrides={"smd": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64,
                                                "p_value": pl.Float64, "significant": pl.Boolean,
                                                "n": pl.Int64, "level": pl.String, "perturber": pl.String,
                                                "sign_agrees": pl.Boolean,
                                                "significance_agrees": pl.Boolean, "reason": pl.String})


def render(table: pl.DataFrame, title: str) -> str:
    """The side-by-side table as text: per metric, one line per strategy ("*": significant)."""
    def cell(smd: float | None, sig: bool | None) -> str:
        return "-" if smd is None else f"{smd:+.3f}{'*' if sig else ''}"

    def interval(row: dict) -> str:
        return "-" if row["ci_low"] is None else f"[{row['ci_low']:+.2f},{row['ci_high']:+.2f}]"

    header = (f"{'metric':<14} {'strategy':<23} {'paper':>8} {'ours':>8} {'95% CI':>13} {'p':>7} {'n':>4} "
              f"{'level':<9} {'perturbed by':<22} sign  signif.  note")
    lines = [title, "", header, "-" * len(header)]
    for row in table.iter_rows(named=True):
        p = "-" if row["p_value"] is None else f"{row['p_value']:.3f}"
        agree = {True: "yes", False: "NO", None: "-"}
        lines.append(f"{row['paper_metric']:<14} {row['paper_strategy']:<23} "
                     f"{cell(row['paper_smd'], row['paper_significant']):>8} {cell(row['smd'], row['significant']):>8} "
                     f"{interval(row):>13} {p:>7} {'-' if row['n'] is None else row['n']:>4} {row['level'] or '-':<9} "
                     f"{row['perturber'] or '-':<22} {agree[row['sign_agrees']]:<4}  "
                     f"{agree[row['significance_agrees']]:<7}  {row['reason'] or ''}")
    measured = table.filter(pl.col("sign_agrees").is_not_null())
    lines += ["", f"cells measured: {measured.height} of {table.height}; sign agrees in "
              f"{int(measured['sign_agrees'].sum())}, significance in "
              f"{int(measured['significance_agrees'].fill_null(False).sum())} "
              "(*: significant in the paper's direction, a fall after a degradation or a rise after a manipulation: "
              "the paper's by its 95% interval, ours by the one-sided paired t-test, p < alpha; 95% CI: ours, of d)"]
    return "\n".join(lines)
