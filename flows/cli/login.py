"""`grebench login --check`, as a plain typer-style function (registered with `app.command()(login)`)."""

from __future__ import annotations

from typing import Annotated

import typer

from flows.cli.common import ConfigOption, fail, read_config
from tasks.core.errors import GrebenchError


def login(
    check: Annotated[bool, typer.Option("--check", help="log in as the environment says and show who, until when")]
    = False,
    pipeline: Annotated[str | None, typer.Option("--pipeline", "-p", help="whose API hosts (default: the scheduled "
                                                 "refresh's pipeline)")] = None,
    config: ConfigOption = None,
) -> None:
    """Check the OpenReview login from the environment (OPENREVIEW_TOKEN, or OPENREVIEW_USERNAME and
    OPENREVIEW_PASSWORD, with OPENREVIEW_TOTP_SECRET for a two-factor account) on the pipeline's API
    hosts: who, and when the token expires. No credential is printed, stored or asked for."""
    from tasks.stages.ingest.login_check import check_pipeline_login

    if not check:
        fail("grebench keeps no login of its own: each run logs in from the environment (docs/openreview.md); "
             "`grebench login --check` tests that login")
    cfg = read_config(config)
    try:
        identities = check_pipeline_login(cfg, pipeline or cfg.schedule.pipeline)
    except GrebenchError as error:
        fail(str(error).splitlines()[0] if str(error) else type(error).__name__)
    for identity in identities:
        typer.echo(identity.line())
