"""Names in the config checked against the registries, in one place.

The config (tasks/core/config.py) validates its own shape; whether a metric or a validation
strategy it names exists is known only to the registries above it (tasks/metrics/registry.py,
tasks/stages/validate/strategies.py). `check_config` asks them, for the file's own tables and for
every pipeline's overrides, and raises the same one-line `ConfigError` the shape checks do.
The pipeline flow and the CLI read the config through `load_checked_config`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from tasks.core.config import DEFAULT_CONFIG, Config, ConfigError, load_config
from tasks.metrics import check_names
from tasks.stages.validate.strategies import check_strategies


def _names(cfg: Config) -> list[tuple[str, Sequence[str], Callable[[Sequence[str]], object]]]:
    return [
        ("score.metrics", cfg.score.metrics, check_names),
        ("score.baselines", cfg.score.baselines, lambda names: check_names(names) if names else names),
        ("score.headline", cfg.score.headline, lambda names: check_names(names) if names else names),
        ("validate.metrics", cfg.validate.metrics, check_names),
        ("validate.strategies", cfg.validate.strategies, check_strategies),
    ]


def check_config(cfg: Config, pipelines: bool = True) -> Config:
    """`cfg` when every metric and strategy it names (its pipelines' overrides too) is registered."""
    scopes = [("", cfg)]
    if pipelines:
        scopes += [(f"pipelines.{name}.", cfg._alone(name, spec)) for name, spec in cfg.pipelines.items()]
    for prefix, scoped in scopes:
        for key, names, check in _names(scoped):
            try:
                check(names)
            except ValueError as error:
                raise ConfigError(f"{prefix}{key}: {error} (got {tuple(names)!r})") from None
        _check_seq2seq(prefix, scoped)
        _check_reviews(prefix, scoped)
        _check_adversary(prefix, scoped)
    return cfg


def _check_adversary(prefix: str, cfg: Config) -> None:
    """The adversary's test part can hold `[validate] min_pairs` pairs, else its row could never decide."""
    from tasks.stages.validate.adversary import papers_tested

    v = cfg.validate
    if "adversary" not in v.strategies or v.candidates != "one":   # with every review a candidate: more pairs
        return
    most = papers_tested(v.max_papers, v.adversary_search_papers)
    if most < v.min_pairs:
        how = ("every paper of the sample" if v.adversary_search_papers else
               f"the half of max_papers = {v.max_papers} its search does not see")
        raise ConfigError(f"{prefix}validate: the adversary is tested on {how}, at most {most} pair(s), fewer than "
                          f"min_pairs = {v.min_pairs}, so its rows can never decide: raise max_papers, or set "
                          "adversary_search_papers to search on papers outside the sample")


def _check_reviews(prefix: str, cfg: Config) -> None:
    """`[validate] reviews` names the curated reviews, a shipped sample or a review file that exists."""
    from tasks.stages.validate.review_data import review_file

    try:
        review_file(cfg)
    except ValueError as error:
        raise ConfigError(f"{prefix}validate.reviews: {error}") from None


def _check_seq2seq(prefix: str, cfg: Config) -> None:
    """A seq2seq BARTScore named without `[score] bartscore_model` stops at load, not after generation."""
    from tasks.metrics import get
    from tasks.metrics.registry import SEQ2SEQ

    named = list(dict.fromkeys((*cfg.score.metrics, *cfg.score.baselines, *cfg.validate.metrics)))
    seq2seq = [m.name for m in get(named) if m.needs is SEQ2SEQ]
    if seq2seq and not cfg.score.bartscore_model:
        raise ConfigError(f"{prefix}score: {', '.join(seq2seq)} need a seq2seq model: set [score] bartscore_model "
                          "(e.g. facebook/bart-large-cnn), or use bartscore_* on the evaluation LM as GEM did")


def load_checked_config(path: Path | str = DEFAULT_CONFIG) -> Config:
    """`load_config(path)` with every name checked against the registries."""
    cfg = load_config(path)
    try:
        return check_config(cfg)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None
