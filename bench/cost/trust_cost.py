"""What the trust checks cost on a pipeline that has run: Binoculars over every human reference
(the score stage's reference flags) and the injection track's reviews for one candidate.

    PYTHONPATH=. .venv/bin/python bench/cost/trust_cost.py --config pipelines.toml --pipeline demo

Reads the pipeline's curated reviews and benchmark papers (run `grebench run demo` first), scores
the references as the score stage does (`tasks/stages/score/reference_flags.py`, the configured
pair), then generates the first candidate's reviews of the injection track's planted copies with a
fresh answer cache (so nothing is reused) for `--papers` papers. Prints the figures, the last line
as JSON.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from tasks.core.config import InjectionConfig, load_config
from tasks.core.frames import curated_reviews, read_curated
from tasks.lm import load_model, make_lm
from tasks.stages.generate.reviews import injected_reviews
from tasks.stages.score.reference_flags import flag_specs, reference_flags


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="pipelines.toml")
    parser.add_argument("--pipeline", default="demo")
    parser.add_argument("--papers", type=int, default=2, help="papers of the injection track")
    args = parser.parse_args()
    cfg = load_config(Path(args.config)).for_pipeline(args.pipeline)

    references = curated_reviews(cfg, args.pipeline)
    specs = flag_specs(cfg)
    if specs is not None:
        load_model(specs[0])    # loading is not the cost measured
    start = time.perf_counter()
    flags = reference_flags(references, specs, cfg.score.reference_flags.threshold)
    flag_s = time.perf_counter() - start

    _, papers, pdf_texts = read_curated(cfg, args.pipeline)
    candidate = cfg.generate.candidates[0]
    track = InjectionConfig(**{**cfg.generate.injection.model_dump(), "papers": args.papers})
    with tempfile.TemporaryDirectory() as cache:
        backend = make_lm(candidate, Path(cache))
        start = time.perf_counter()
        run = injected_reviews(papers, papers, pdf_texts, candidate, backend, track, cfg.generate.chars_per_token)
        inject_s = time.perf_counter() - start
    reviews = 0 if run is None else run.candidates.height
    figures = {"references": flags.height, "flagged": int(flags["flagged"].sum() or 0),
               "binoculars_s": round(flag_s, 1), "binoculars_s_per_reference": round(flag_s / max(flags.height, 1), 2),
               "candidate": candidate.name, "injection_papers": args.papers, "variants": list(track.variants),
               "injected_reviews": reviews, "injection_s": round(inject_s, 1),
               "injection_s_per_review": round(inject_s / max(reviews, 1), 1)}
    for key, value in figures.items():
        print(f"{key}: {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
