"""Dagster's Terminate on a run that is reading: `dagster dev` (webserver, daemon, code server,
run worker, its local Spark) on the project's defs.yaml against the emulators.

The run is launched and terminated through the GraphQL API the UI uses (the run coordinator,
then the run launcher, interrupt the step, which runs in the run worker's process). The step winds
down by Dagster's own interrupt, fails without a retry and the run ends CANCELED: its
leases are released with the intents kept, its Spark session and JVM end with the step, and a
second run takes over at once (no wait for the lease expiry) and lands every event once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.settings import StoreSettings
from tests.support.fixtures.dagster import dagster_dev, defs_yaml_env
from tests.support.landed import assert_exactly_once, landed_events, sent_events
from tests.support.processes import descendants, spark_processes, still_running

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

JOB = "eventhub_events_job"
LOCATION = "eventhub_ingest"  # workspace.yaml
LEASE_EXPIRY = 60  # dagster_project/defs/eventhub_events/defs.yaml
ALL = {"dagster/asset_partition_range_start": "0", "dagster/asset_partition_range_end": "3"}


def _wait(what: str, condition: Callable[[], bool], timeout: float, log: Path) -> float:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, f"no {what}: " + log.read_text()[-4000:]
        time.sleep(0.2)
    return time.monotonic() - started


def _status(home: Path, run_id: str) -> dg.DagsterRunStatus:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        run = instance.get_run_by_id(run_id)
        assert run is not None
        return run.status


def _event_types(home: Path, run_id: str) -> list[str]:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        events = [e.dagster_event for e in instance.all_logs(run_id)]
        return [e.event_type_value for e in events if e is not None]


def _messages(home: Path, run_id: str) -> str:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        return "\n".join(e.message or "" for e in instance.all_logs(run_id))


@pytest.mark.timeout(1500)
def test_a_terminated_run_releases_its_leases_ends_its_jvm_and_is_taken_over_at_once(
    make_eventhub: Callable[..., Any],
    azurite_connection_string: str,
    container_name: str,
    tmp_path: Path,
) -> None:
    from dagster_graphql import DagsterGraphQLClient

    hub = make_eventhub(partitions=4)
    sent = {p: [f"p{p}-e{i}-".encode() * 4 for i in range(900)] for p in hub.partition_ids}
    for pid, bodies in sent.items():
        hub.send(pid, bodies)
    home = tmp_path / "dagster_home"
    sink = tmp_path / "sink"
    env = {
        **defs_yaml_env(home, hub, azurite_connection_string, container_name, sink),
        # Each reader sleeps this long per batch received: the read lasts long enough to stop.
        "EHINGEST_SLOW_READ_SECONDS": "3",
    }
    store = PartitionStore(
        AzureBlobBackend.from_settings(
            StoreSettings(container=container_name, connection_string=azurite_connection_string)
        ),
        hub.settings().hub_ref(),
    )
    log = tmp_path / "dagster-dev.log"
    with dagster_dev(env, log) as dev:
        client = DagsterGraphQLClient("127.0.0.1", port_number=dev.port)
        first = client.submit_job_execution(JOB, repository_location_name=LOCATION, tags=ALL)

        def reading() -> bool:
            intents = [o for o in store.list_ownership().values() if o.intent is not None]
            workers = [p for p in spark_processes(dev.proc.pid) if p.name().startswith("python")]
            return len(intents) == 4 and len(workers) >= 2

        _wait("read in progress", reading, 600, log)
        time.sleep(2)  # the readers are receiving
        spark = spark_processes(dev.proc.pid)
        assert spark, [p.name() for p in descendants(dev.proc.pid)]
        client.terminate_run(first)
        took = _wait(
            "canceled run", lambda: _status(home, first) == dg.DagsterRunStatus.CANCELED, 120, log
        )
        # Dagster's own steps (GraphQL, the code server, the run worker's poll) plus ours.
        assert took < 30, took
        gone = _wait("JVM gone", lambda: still_running(spark) == [], 15, log)
        print(f"terminate: CANCELED after {took:.1f} s, Spark processes gone {gone:.1f} s later")
        assert spark_processes(dev.proc.pid) == []
        assert store.list_checkpoints() == {}
        owns = store.list_ownership()
        assert len(owns) == 4
        for own in owns.values():
            assert own.is_released, own  # released by the step, not left to expire
            assert own.intent is not None and own.intent.owner_id == first  # kept
        text = _messages(home, first)
        assert "the run stopped while reading and writing" in text or "interrupted" in text, text
        # The project's runs execute their one step in the run worker's process; Terminate
        # there is a step failure that is never retried, not the RetryPolicy's retry.
        assert "Executing steps in process" in text, text[-3000:]
        types = _event_types(home, first)
        assert "STEP_UP_FOR_RETRY" not in types and "STEP_RESTARTED" not in types, types
        assert "STEP_FAILURE" in types and "PIPELINE_CANCELED" in types, types

        second = client.submit_job_execution(JOB, repository_location_name=LOCATION, tags=ALL)
        done = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE}
        took = _wait("second run", lambda: _status(home, second) in done, 900, log)
        assert _status(home, second) == dg.DagsterRunStatus.SUCCESS, _messages(home, second)
        text = _messages(home, second)
        assert "reason=expired" not in text and took < LEASE_EXPIRY + 60, (took, text[-3000:])
        assert text.count(f"left by {first}") >= 4, text[-3000:]  # every intent replayed
        print(f"terminate: the next run took over at once and finished in {took:.1f} s")
    assert_exactly_once(landed_events(sink), sent_events(sent))
