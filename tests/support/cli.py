"""Running ``ehingest`` as a user does: a child process of this Python, from the repository root,
with a config file of the user's form (:func:`write_config`), or the same file's run in this
process on the test's Spark session (:func:`run_in_process`).

One home for the command line, its config file and its time-out. The time-out is generous: a
cold Spark start took 240 s when the CI tiers started beside a test on 2 cores; what it guards
against is a run that hangs, not a slow one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "CLI",
    "CLI_TIMEOUT",
    "ROOT",
    "ehingest",
    "load_ingest",
    "run_in_process",
    "sink_block",
    "start_ehingest",
    "write_config",
]

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


def sink_block(fmt: str, tmp_path: Path) -> dict[str, Any]:
    """The ``sink:`` block of a config for ``fmt`` (``table``: a new parquet catalog table)."""
    if fmt == "table":
        return {"format": "parquet", "table": f"t_{uuid.uuid4().hex[:12]}"}
    return {"format": fmt, "path": str(tmp_path / "out")}


def write_config(
    tmp_path: Path,
    hub: Any,
    container: str,
    *,
    name: str | None = None,
    sink: Mapping[str, Any] | None = None,
    eventhub: Mapping[str, Any] | None = None,
    eh_conn_env: str = "EH_CONN",
    store_conn_env: str = "ST_CONN",
    **extra: Any,
) -> Path:
    """An ``ehingest`` config file (``tmp_path/<name>.yaml``, a new name by default) for the
    emulator ``hub`` and the Azurite ``container``.

    The connection strings come from ``$<eh_conn_env>`` and ``$<store_conn_env>``; the sink is
    Parquet under ``tmp_path/out`` unless ``sink`` is given; Spark is one local core; a run
    takes leases for 15 s, joins without a grace and reports no lag. ``eventhub`` adds keys to the
    ``eventhub:`` block (``consumer_group``); ``extra`` sets top-level keys (run options,
    ``spark``), None leaving a key out (the product's default).
    """
    config = {
        "eventhub": {
            "credential": {"connection_string_env": eh_conn_env},
            "eventhub_name": hub.name,
            **(eventhub or {}),
        },
        "store": {"credential": {"connection_string_env": store_conn_env}, "container": container},
        "sink": dict(sink) if sink is not None else sink_block("parquet", tmp_path),
        "lease_expiry_seconds": 15,
        "join_grace_seconds": 0,
        "report_lag_seconds": False,
        "spark": {"master": "local[1]", "conf": {"spark.sql.shuffle.partitions": 1}},
        **extra,
    }
    config = {key: value for key, value in config.items() if value is not None}
    path = tmp_path / f"{name or uuid.uuid4().hex[:8]}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def load_ingest(config: Path, env: Mapping[str, str]) -> Any:
    """The run settings the CLI would take from ``config`` with ``env`` over this process's."""
    from dagster_eventhub_ingest.cli.config import load_config

    return load_config(config, env={**os.environ, **env}).ingest


def run_in_process(spark: Any, config: Path, env: Mapping[str, str], owner: str, **overrides: Any):
    """``ehingest run`` without a new JVM: the same config, this session's Spark."""
    from dagster_eventhub_ingest.ops.run.entry import run_ingestion

    ingest = load_ingest(config, env)
    if overrides:
        ingest = ingest.replace(**overrides)
    return run_ingestion(ingest, spark, owner_id=owner)
