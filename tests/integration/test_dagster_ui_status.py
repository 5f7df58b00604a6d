"""What the UI reads about the lag check and freshness, asked through Dagster's GraphQL.

Real runs and real sensor ticks against the local emulators and a DagsterInstance on disk; the
definitions load in a code server as ``dagster dev`` loads them, and the status is read with
the query the asset page makes (``assetChecksOrError`` / ``executionForLatestMaterialization``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql

from dagster_eventhub_ingest.dagster_project.assets import RUNNER_TAG
from dagster_eventhub_ingest.dagster_project.checks import LAG_CHECK_NAME, LAST_UPDATED_KEY
from dagster_eventhub_ingest.resources.store.settings import StoreSettings
from tests.support.fixtures.dagster import CHECKS_QUERY, eventhub_resource, store_resource

pytestmark = [pytest.mark.integration, pytest.mark.spark]

KEY = "events"
RANGE = {"dagster/asset_partition_range_start": "0", "dagster/asset_partition_range_end": "3"}


#: The definitions as the code server loads them: the same builder, on the test's services.
DEFS_MODULE = """
from dagster_eventhub_ingest.dagster_project import IngestAssetConfig
from dagster_eventhub_ingest.dagster_project.component import build_eventhub_ingest_defs
from dagster_eventhub_ingest.dagster_project.resources import (
    EventHubConnectionString, EventHubResource, PartitionStoreResource, SinkResource,
    StoreConnectionString,
)
from dagster_eventhub_ingest.resources.config import LagCheckOptions

defs = build_eventhub_ingest_defs(
    key={key!r},
    eventhub=EventHubResource(
        eventhub_name={hub!r},
        credential=EventHubConnectionString(connection_string={hub_conn!r}),
    ),
    partition_store=PartitionStoreResource(
        container={container!r},
        credential=StoreConnectionString(connection_string={store_conn!r}),
    ),
    sink=SinkResource(path={sink!r}),
    partition_ids={partitions!r},
    options=IngestAssetConfig(lag_check=LagCheckOptions(max_lag_events=5, running=False)),
)
"""


@pytest.fixture
def ui(
    make_eventhub: Callable[..., Any],
    blob_store_settings: StoreSettings,
    tmp_path: Path,
    spark: Any,
    dagster_instance: dg.DagsterInstance,
) -> Iterator[dict[str, Any]]:
    from dagster_eventhub_ingest.dagster_project import IngestAssetConfig
    from dagster_eventhub_ingest.dagster_project.component import build_eventhub_ingest_defs
    from dagster_eventhub_ingest.dagster_project.resources import (
        SinkResource,
        local_pyspark_resource,
    )
    from dagster_eventhub_ingest.resources.config import LagCheckOptions
    from tests.support.fixtures.dagster import FAST_RETRY

    hub = make_eventhub(partitions=4)
    sink = tmp_path / "sink"
    settings = hub.settings()
    module = tmp_path / "ui_defs.py"
    module.write_text(
        DEFS_MODULE.format(
            key=KEY,
            hub=settings.eventhub_name,
            hub_conn=settings.connection_string,
            container=blob_store_settings.container,
            store_conn=blob_store_settings.connection_string,
            sink=str(sink),
            partitions=list(hub.partition_ids),
        )
    )

    def defs(**options: Any) -> dg.Definitions:
        return build_eventhub_ingest_defs(
            key=KEY,
            eventhub=eventhub_resource(settings),
            partition_store=store_resource(blob_store_settings),
            sink=SinkResource(path=str(sink)),
            pyspark=local_pyspark_resource({"spark.master": "local[2]"}),
            partition_ids=list(hub.partition_ids),
            options=IngestAssetConfig(
                lag_check=LagCheckOptions(max_lag_events=5, running=False), **options
            ),
            retry_policy=FAST_RETRY,
        )

    with define_out_of_process_context(str(module), "defs", dagster_instance) as context:
        yield {"hub": hub, "defs": defs, "context": context, "instance": dagster_instance}


def _fill(hub: Any, events: int) -> None:
    for pid in hub.partition_ids:
        hub.send(pid, [f"p{pid}-e{i}" for i in range(events)])


def _tick(defs: dg.Definitions, instance: dg.DagsterInstance, name: str) -> list[Any]:
    """One sensor tick, its asset events stored as the sensor daemon stores them."""
    sensor = defs.resolve_sensor_def(name)
    resources = {k: defs.resources[k] for k in (f"{KEY}_eventhub", f"{KEY}_partition_store")}  # type: ignore[index]
    data = sensor.evaluate_tick(dg.build_sensor_context(instance=instance, resources=resources))
    for event in data.asset_events:
        instance.report_runless_asset_event(event)
    return list(data.asset_events)


def _shown(context: Any) -> dict[str, Any] | None:
    """The lag check's status as the asset page reads it (None: "Not evaluated")."""
    result = execute_dagster_graphql(context, CHECKS_QUERY, {"key": {"path": [KEY]}})
    assert not result.errors, result.errors
    checks = result.data["assetNodeOrError"]["assetChecksOrError"]["checks"]
    (lag,) = [c for c in checks if c["name"] == LAG_CHECK_NAME]
    return lag["executionForLatestMaterialization"]


def _run(defs: dg.Definitions, instance: dg.DagsterInstance, *, scheduled: bool = False) -> Any:
    job = defs.resolve_job_def(f"{KEY}_job")
    tags = {**RANGE, RUNNER_TAG: "1/1"} if scheduled else RANGE
    return job.execute_in_process(instance=instance, raise_on_error=False, tags=tags)


@pytest.mark.timeout(420)
def test_the_lag_check_shows_the_newest_measurement_in_either_order(
    ui: dict[str, Any],
) -> None:
    hub, instance, context = ui["hub"], ui["instance"], ui["context"]
    _fill(hub, events=3000)
    defs = ui["defs"]()

    # Sensor first: nothing landed, the check fails.
    _tick(defs, instance, f"{KEY}_lag")
    shown = _shown(context)
    assert shown is not None and shown["status"] == "FAILED" and shown["runId"] == ""

    # A run with a sensor tick while it is going: the tick measures a backlog, the run then
    # lands everything and measures 0. The run's measurement is the newer one and shows.
    run = _run_with_a_tick_meanwhile(defs, instance, defs.resolve_job_def(f"{KEY}_job"))
    shown = _shown(context)
    assert shown is not None, "Not evaluated after a run that evaluated the check"
    assert (shown["runId"], shown["status"]) == (run.run_id, "SUCCEEDED")

    # Sensor after the run: its newer measurement shows, not "Not evaluated".
    _tick(defs, instance, f"{KEY}_lag")
    shown = _shown(context)
    assert shown is not None and (shown["runId"], shown["status"]) == ("", "SUCCEEDED")

    # A run with nothing new (a scheduled run: no materialization) still shows its evaluation.
    quiet = _run(defs, instance, scheduled=True)
    assert quiet.success and not quiet.get_asset_materialization_events()
    shown = _shown(context)
    assert shown is not None and (shown["runId"], shown["status"]) == (quiet.run_id, "SUCCEEDED")


def _run_with_a_tick_meanwhile(defs: dg.Definitions, instance: dg.DagsterInstance, job: Any) -> Any:
    """Run ``job`` over every partition; once its step is reading, a lag-sensor tick."""
    result: dict[str, Any] = {}

    def run() -> None:
        result["run"] = job.execute_in_process(instance=instance, raise_on_error=False, tags=RANGE)

    runner = threading.Thread(target=run)
    runner.start()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        started = instance.get_runs(dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
        logs = instance.all_logs(started[0].run_id) if started else []
        if any("ingesting" in (e.user_message or "") for e in logs):
            break  # the step is reading
        time.sleep(0.1)
    # A tick that starts while the run reads. It may finish after the run has reported (a
    # fast run on an idle machine): then it must leave the check alone, asserted below.
    tick_started = time.time()
    during = _tick(defs, instance, f"{KEY}_lag")
    runner.join(timeout=300)
    assert result["run"].success
    # The tick measured a backlog (or, had the run reported meanwhile, left the check alone).
    assert isinstance(during[0], dg.AssetObservation)
    assert during[0].metadata["eventhub/total_lag_events"].value > 0, "the tick came too late"
    assert all(not e.passed for e in during if isinstance(e, dg.AssetCheckEvaluation))
    end = instance.get_run_record_by_id(result["run"].run_id)
    assert end is not None and end.end_time is not None and end.end_time > tick_started
    return result["run"]


@pytest.mark.timeout(420)
def test_a_run_that_plans_the_check_step_still_shows_its_newer_measurement(
    ui: dict[str, Any],
) -> None:
    """The UI's Materialize plans an asset's checks in the run (whose step the asset's run then
    skips): the run's measurement still out-ranks a sensor tick taken while it ran."""
    hub, instance, context = ui["hub"], ui["instance"], ui["context"]
    _fill(hub, events=3000)
    defs = ui["defs"]()
    job = defs.resolve_implicit_global_asset_job_def()  # the asset and its checks, as the UI
    run = _run_with_a_tick_meanwhile(defs, instance, job)
    lag = dg.AssetCheckKey(dg.AssetKey(KEY), LAG_CHECK_NAME)
    assert lag in job.asset_layer.asset_graph.asset_check_keys  # planned at the run's start
    logs = [e.user_message for e in instance.all_logs(run.run_id)]
    assert any("reported as measured at the end of this run" in m for m in logs)
    shown = _shown(context)
    assert shown is not None and shown["status"] == "SUCCEEDED", shown


def _freshness(defs: dg.Definitions, instance: dg.DagsterInstance) -> dg.AssetCheckEvaluation:
    """Run Dagster's freshness check (as its sensor would) and return its evaluation."""
    graph = defs.resolve_asset_graph()
    (key,) = [k for k in graph.asset_check_keys if k.name != LAG_CHECK_NAME]
    job = dg.define_asset_job("freshness_now", selection=dg.AssetSelection.checks(key))
    merged = dg.Definitions.merge(defs, dg.Definitions(jobs=[job]))
    result = merged.resolve_job_def("freshness_now").execute_in_process(instance=instance)
    (evaluation,) = result.get_asset_check_evaluations()
    return evaluation


@pytest.mark.timeout(300)
def test_freshness_follows_the_backlog_not_the_last_materialization(
    ui: dict[str, Any],
) -> None:
    hub, instance = ui["hub"], ui["instance"]
    _fill(hub, events=10)
    # A 6-second window, so a backlog goes stale within the test.
    defs = ui["defs"](freshness_fail_minutes=0.1)
    assert _run(defs, instance).success
    assert _freshness(defs, instance).passed

    # Quiet hub, time passes, no run: each lag tick measures it caught up, so it stays fresh
    # although the last materialization is older than the window.
    time.sleep(7)
    (summary, _) = _tick(defs, instance, f"{KEY}_lag")
    assert summary.metadata[LAST_UPDATED_KEY].value >= time.time() - 5
    assert _freshness(defs, instance).passed

    # A backlog that grows past the window, no run: overdue at the next measurement.
    _fill(hub, events=3)
    time.sleep(7)
    _tick(defs, instance, f"{KEY}_lag")
    assert not _freshness(defs, instance).passed

    # A run catches up: fresh again.
    assert _run(defs, instance).success
    assert _freshness(defs, instance).passed
