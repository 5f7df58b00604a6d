"""Running ``ehingest`` as a user does: a child process of this Python, from the repository root.

One home for the command line and its time-out. The time-out is generous: a cold Spark start
took 240 s when the CI tiers started beside a test on 2 cores; what it guards against is a run
that hangs, not a slow one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["CLI", "CLI_TIMEOUT", "ROOT", "ehingest", "start_ehingest"]

#: The repository root (the tests run the CLI from there, as the README does).
ROOT = Path(__file__).resolve().parents[2]

#: ``ehingest`` as this interpreter runs it, without depending on the console script's PATH.
CLI: tuple[str, ...] = (sys.executable, "-m", "dagster_eventhub_ingest.cli.main")

#: Seconds before a CLI call counts as hung.
CLI_TIMEOUT = 480.0


def ehingest(
    *args: str,
    env: Mapping[str, str],
    timeout: float = CLI_TIMEOUT,
    base_env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``ehingest *args`` to its end with ``env`` over ``base_env`` (this process's
    environment by default); output captured as text."""
    return subprocess.run(
        [*CLI, *args],
        cwd=ROOT,
        env={**(os.environ if base_env is None else base_env), **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_ehingest(
    *args: str, env: Mapping[str, str], log: Path, own_session: bool = True
) -> subprocess.Popen[bytes]:
    """Start ``ehingest *args`` in the background with exactly ``env`` (no variable of this
    process added), its output and errors into ``log``. In its own session by default, so a test
    can end it with its JVM and workers by its process group, whatever happens."""
    with log.open("wb") as out:  # the child holds its own copy of the descriptor
        return subprocess.Popen(
            [*CLI, *args],
            cwd=ROOT,
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=own_session,
        )
