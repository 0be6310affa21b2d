"""What every settings module shares: the frozen base model, the list of stages, and the checks of
names that become folders (pipeline names, venue ids).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from tasks.core.errors import ConfigError

BackendName = Literal["local", "anthropic", "openai"]   # tasks/lm/backends.py BACKENDS, checked there
# The one list of stages, in pipeline order; each has a folder tasks/stages/<stage>/ and a flow flows/<stage>.py.
Stage = Literal["ingest", "curate", "preprocess", "generate", "qualify", "score", "validate", "materialize"]
STAGES: tuple[Stage, ...] = get_args(Stage)
# the stages with a table of settings in pipelines.toml (a pipeline may override them)
CONFIGURED_STAGES = tuple(s for s in STAGES if s != "materialize")
# The stage is called "validate", which shadows the deprecated BaseModel.validate; that is intended.
warnings.filterwarnings("ignore", message=r'Field name "validate" in "\w+" shadows', category=UserWarning)


# A random seed: what numpy's generators and Python's `random` take alike (0 .. 2**32 - 1)
Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)  # NaN / inf: never a setting


# Names that become folder and file names (tasks/core/layout.py) and words of suggested shell commands:
# letters, digits, ".", "_" and "-", starting with a letter or digit, never "..".
PIPELINE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
# A venue id is "/"-separated segments of the same characters (OpenReview's "ICLR.cc/2023/Conference");
# "{year}" may stand in a segment of a yearly template. No segment is empty, "." or "..".
VENUE_SEGMENT = re.compile(r"[A-Za-z0-9_-]([A-Za-z0-9._-]|\{year\})*|\{year\}([A-Za-z0-9._-]|\{year\})*")


def check_pipeline_name(name: str) -> str:
    """`name` when it is a safe pipeline name; else a ValueError saying what is allowed."""
    if not PIPELINE_NAME.fullmatch(name) or ".." in name:
        raise ValueError(f"pipeline name {name!r} is not allowed: use letters, digits, '.', '_' and '-' "
                         "(starting with a letter or digit, no '..', at most 100 characters)")
    return name


def check_venue_id(venue_id: str) -> str:
    """`venue_id` when every "/"-separated segment is safe; else a ValueError saying what is allowed."""
    segments = venue_id.split("/")
    if len(venue_id) > 300 or not all(VENUE_SEGMENT.fullmatch(s) and ".." not in s for s in segments):
        raise ValueError(f"venue id {venue_id!r} is not allowed: '/'-separated parts of letters, digits, '.', "
                         "'_' and '-' (each starting with a letter, digit, '_' or '-'; no empty part, no '..')")
    return venue_id


def select_stages(configured: Sequence[str], chosen: Sequence[str] | None) -> list[str]:
    """The pipeline's stages, or the `chosen` subset of them, in pipeline order. Every chosen name must
    be a stage of the pipeline, named once; `--stages` (CLI) and `stages` (flow) both pass through here."""
    if not chosen:
        return list(configured)
    if not all(chosen):
        raise ConfigError(f"--stages {','.join(chosen)!r}: an empty stage name (give e.g. --stages ingest,curate)")
    unknown = [s for s in chosen if s not in STAGES]
    if unknown:
        raise ConfigError(f"--stages: unknown stage(s) {unknown} (stages: {', '.join(STAGES)})")
    missing = [s for s in chosen if s not in configured]
    if missing:
        raise ConfigError(f"--stages: {missing} not in this pipeline (its stages: {', '.join(configured)})")
    repeated = sorted({s for s in chosen if list(chosen).count(s) > 1})
    if repeated:
        raise ConfigError(f"--stages: {repeated} named more than once")
    return [s for s in STAGES if s in chosen]
