"""Tiny synthetic inputs for the score-stage tests: papers, reviews, judgments, synopses, a config."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl

from tasks.core.layout import slug

VENUE = "Scoring.cc/2025/Test"
TOPICS = (
    "the clarity of the writing", "the size of the experiments", "the novelty of the idea",
    "the choice of baselines", "the depth of the theoretical analysis", "the reproducibility of the results",
    "the ablation studies", "the discussion of related work", "the computational cost",
    "the choice of evaluation metrics", "the diversity of the datasets", "the sensitivity to hyperparameters",
    "the motivation of the problem", "the quality of the figures", "the statistical significance of the gains",
    "the scalability to larger models", "the treatment of limitations", "the release of the code",
)
STANCES = {
    "appreciates": "The reviewer appreciates {}.",
    "criticizes": "The reviewer criticizes {}.",
    "questions": "The reviewer questions {}.",
    "suggests": "The reviewer suggests improving {}.",
}


def judgment(rng: random.Random, exclude: set[str] = frozenset()) -> str:
    while True:
        line = rng.choice(list(STANCES.values())).format(rng.choice(TOPICS))
        if line not in exclude:
            return line


def judgments(rng: random.Random, n: int, exclude: set[str] = frozenset()) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        out.append(judgment(rng, set(exclude) | set(out)))
    return out


def make_frames(n_papers: int, n_reviews: int, seed: int = 7) -> dict[str, pl.DataFrame]:
    """Curated reviews, judgments (one row per line) and synopses (abstract + ASSW) of a few papers."""
    rng = random.Random(seed)
    reviews, lines, synopses = [], [], []
    for p in range(n_papers):
        paper = f"paper{p}"
        synopses.append({"paper_id": paper, "kind": "abstract", "source": "test", "model": "none",
                         "text": f"We study problem {p} with a new method and report gains on benchmarks."})
        synopses.append({"paper_id": paper, "kind": "assw", "source": "test", "model": "none",
                         "text": "Claimed strengths: a simple method.\nClaimed weaknesses: small datasets."})
        for r in range(n_reviews):
            review = f"{paper}-r{r}"
            points = judgments(rng, 2)
            reviews.append({"paper_id": paper, "review_id": review,
                            "review_text": "## Summary\n\nA short paper.\n\n## Points\n\n" + " ".join(points)})
            lines += [{"review_id": review, "position": i, "stance": line.split()[2], "text": line,
                       "model": "none", "prompt_version": "test"} for i, line in enumerate(points)]
    return {
        "reviews": pl.DataFrame(reviews),
        "judgments": pl.DataFrame(lines, schema_overrides={"position": pl.Int32}),
        "synopses": pl.DataFrame(synopses),
    }


def write_pipeline(root: Path, n_papers: int = 2, n_reviews: int = 3, **score: object) -> Path:
    """A pipelines.toml for pipeline "t" plus its curate and preprocess outputs under root/data."""
    score.setdefault("baselines", [])  # GEM only unless a test asks for the classic metrics
    settings = "\n".join(f"{key} = {_toml(value)}" for key, value in score.items())
    config = root / "pipelines.toml"
    config.write_text(
        f'[paths]\ndata_dir = "data"\ndatabase = "data/t.duckdb"\n\n[score]\n{settings}\n\n'
        f'[pipelines.t]\nsource = "synthetic"\nvenues = ["{VENUE}"]\nstages = ["score"]\n'
    )
    frames = make_frames(n_papers, n_reviews)
    curate = root / "data" / "t" / slug(VENUE) / "curate"
    preprocess = root / "data" / "t" / "preprocess"
    curate.mkdir(parents=True)
    preprocess.mkdir(parents=True)
    frames["reviews"].write_parquet(curate / "reviews.parquet")
    frames["judgments"].write_parquet(preprocess / "judgments.parquet")
    frames["synopses"].write_parquet(preprocess / "synopses.parquet")
    return config


def _toml(value: object) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value).lower() if isinstance(value, bool) else str(value)


def note_shard_workers(root: Path, monkeypatch) -> Path:
    """Have every scored shard note the dask worker that scored it, in root/workers/<shard> (the task
    travels to the workers pickled by value, so the note is a file, not a variable); that folder."""
    from distributed import get_worker

    import tasks.scoring.shards as shards_module

    seen = root / "workers"
    seen.mkdir()
    real = shards_module.score_shard

    def recording(requests_dir, results_dir, shard, spec, token_budget):
        (seen / shard).write_text(get_worker().address)
        return real(requests_dir, results_dir, shard, spec, token_budget)

    monkeypatch.setattr(shards_module, "score_shard", recording)
    return seen
