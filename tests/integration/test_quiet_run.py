"""A run with nothing to read, as a scheduler starts it: a fresh ``ehingest run`` process.

Most scheduled runs of a quiet hub find nothing new. Such a run asks the hub and the store and
reports every partition up to date; it imports no pyspark, py4j or pyarrow (nor starts a JVM),
so it pays for none of them. The Dagster step's twin is in tests/integration/test_dagster_runs.py
(``test_a_run_with_nothing_to_read_starts_no_jvm``), the Airflow task's in
tests/airflow/test_airflow_dags.py (``test_a_task_with_nothing_to_read_imports_no_spark``).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dagster_eventhub_ingest.resources.store.settings import StoreSettings
from tests.support.cli import CLI_TIMEOUT, ROOT, write_config
from tests.support.fixtures.emulator import checkpoint_at_last_event
from tests.support.imports import imported, reporting_imports

pytestmark = pytest.mark.integration

_EVENTS = 5


@pytest.mark.timeout(CLI_TIMEOUT + 60)
@pytest.mark.parametrize("hub_state", ["empty", "checkpointed"])
def test_a_run_with_nothing_to_read_imports_no_spark(
    hub_state: str,
    make_eventhub: Callable[..., Any],
    azurite_connection_string: str,
    container_name: str,
    tmp_path: Path,
) -> None:
    hub = make_eventhub(partitions=2)
    if hub_state == "checkpointed":
        for pid in hub.partition_ids:
            hub.send(pid, [f"{pid}-{i}".encode() for i in range(_EVENTS)])
        store = StoreSettings(container=container_name, connection_string=azurite_connection_string)
        assert checkpoint_at_last_event(hub, store) == dict.fromkeys(hub.partition_ids, _EVENTS - 1)
    config = write_config(tmp_path, hub, container_name)
    env = {**os.environ, "EH_CONN": hub.connection_string, "ST_CONN": azurite_connection_string}
    done = subprocess.run(
        reporting_imports(
            "dagster_eventhub_ingest.cli.main",
            *("run", "--config", str(config), "--json", "--no-progress"),
        ),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["complete"] is True
    assert (report["events"], report["cycles"]) == (0, 0)
    checkpoint = _EVENTS - 1 if hub_state == "checkpointed" else None
    assert {
        pid: (p["up_to_date"], p["events"], p["checkpoint_sequence_number"])
        for pid, p in report["partitions"].items()
    } == {pid: (True, 0, checkpoint) for pid in hub.partition_ids}
    assert imported(done.stderr) == [], "a run with nothing to read imported Spark's modules"
    assert not (tmp_path / "out").exists()
