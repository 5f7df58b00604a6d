"""Real Dagster runs against the local emulators: Azurite, the Event Hubs emulator, local Spark.

Each test gets a fresh hub, container and sink folder, and a real DagsterInstance on disk.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster._core.storage.dagster_run import DagsterRun

from dagster_eventhub_ingest.dagster_project.assets import RUNNER_TAG
from dagster_eventhub_ingest.dagster_project.checks import LAG_CHECK_NAME
from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.settings import StoreSettings
from tests.support.fixtures.dagster import FAST_RETRY
from tests.support.imports import imported, reporting_imports

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
EVENTS = 12
RANGE = {"dagster/asset_partition_range_start": "0", "dagster/asset_partition_range_end": "3"}


def _fill(hub: Any, events: int = EVENTS) -> dict[str, int]:
    sent = {}
    for pid in hub.partition_ids:
        sent[pid] = hub.send(pid, [f"p{pid}-e{i}" for i in range(events)])
    return sent


def _sink_counts(spark: Any, path: Path) -> tuple[dict[str, int], int, int]:
    """Rows per partition, total rows, distinct (partition, sequenceNumber) in the sink."""
    if not path.exists():
        return {}, 0, 0
    df = spark.read.parquet(str(path))
    per = {r["partition"]: r["count"] for r in df.groupBy("partition").count().collect()}
    distinct = df.select("partition", "sequenceNumber").distinct().count()
    return per, df.count(), distinct


def _materializations(result: dg.ExecuteInProcessResult) -> dict[str, dg.AssetMaterialization]:
    return {
        str(e.materialization.partition): e.materialization
        for e in result.get_asset_materialization_events()
    }


@pytest.fixture
def env(
    make_eventhub: Callable[..., Any],
    blob_store_settings: StoreSettings,
    tmp_path: Path,
    spark: Any,
    ingest_defs: Callable[..., dg.Definitions],
) -> dict[str, Any]:
    hub = make_eventhub(partitions=4)
    sink = tmp_path / "sink"

    def defs(**options: Any) -> dg.Definitions:
        return ingest_defs(
            hub.settings(), blob_store_settings, str(sink), list(hub.partition_ids), **options
        )

    store = PartitionStore(
        AzureBlobBackend.from_settings(blob_store_settings), hub.settings().hub_ref()
    )
    return {"hub": hub, "sink": sink, "defs": defs, "store": store, "spark": spark}


def _run(
    defs: dg.Definitions, instance: dg.DagsterInstance, **kwargs: Any
) -> dg.ExecuteInProcessResult:
    job = defs.resolve_job_def("events_job")
    return job.execute_in_process(instance=instance, raise_on_error=False, **kwargs)


def test_one_partition(env: dict[str, Any], dagster_instance: dg.DagsterInstance) -> None:
    sent = _fill(env["hub"])
    result = _run(env["defs"](), dagster_instance, partition_key="2")
    assert result.success
    mats = _materializations(result)
    assert set(mats) == {"2"}
    md = mats["2"].metadata
    # The batch's rows beside the partition's, under Dagster's own keys.
    assert md["dagster/row_count"].value == sent["2"]
    assert md["dagster/partition_row_count"].value == sent["2"]
    assert md["dagster/uri"].value == str(env["sink"])
    assert "dagster/column_schema" in md
    assert md["eventhub/sequence_range"].value == f"0..{sent['2'] - 1}"
    assert result.run_id in md["eventhub/read_by"].value
    # Lag lives where it is current (the check, the summary), never frozen in a batch; every
    # other key of the project sits under its namespace.
    assert not {k for k in md if "lag" in k}
    assert all(k.startswith(("dagster/", "eventhub/")) for k in md), sorted(md)
    per, total, distinct = _sink_counts(env["spark"], env["sink"])
    assert per == {"2": sent["2"]} and total == distinct == sent["2"]
    cps = env["store"].list_checkpoints()
    assert set(cps) == {"2"} and cps["2"].sequence_number == sent["2"] - 1
    # Where the run's time went, in the run's event log as `ehingest run` reports it.
    phases = [
        e.user_message
        for e in dagster_instance.all_logs(result.run_id)
        if e.user_message.startswith(f"run phases owner={result.run_id}: ")
    ]
    assert len(phases) == 1, phases
    assert "spark_start " in phases[0] and "read_write " in phases[0], phases[0]


def test_range_materializes_every_requested_partition(
    env: dict[str, Any], dagster_instance: dg.DagsterInstance
) -> None:
    sent = _fill(env["hub"])
    result = _run(env["defs"](max_lag_events=0), dagster_instance, tags=RANGE)
    assert result.success
    mats = _materializations(result)
    assert set(mats) == {"0", "1", "2", "3"}
    for pid, mat in mats.items():
        md = mat.metadata
        assert md["dagster/row_count"].value == sent[pid]
        assert md["eventhub/bytes"].value > 0
        # Sequence numbers compare only within a partition: text, not a plotted number.
        assert md["eventhub/sequence_range"].value == f"0..{sent[pid] - 1}"
        assert not isinstance(md["eventhub/checkpoint"], dg.IntMetadataValue)
        assert "eventhub/last_enqueued_time" in md and "output_location" not in md
    # Dagster itself counts all four partitions materialized by this one run.
    key = dg.AssetKey("events")
    assert dagster_instance.get_materialized_partitions(key) == {"0", "1", "2", "3"}
    checks = result.get_asset_check_evaluations()
    assert [c.check_name for c in checks] == [LAG_CHECK_NAME] and checks[0].passed
    # The Overview's asset-level summary: one observation without a partition, over every
    # partition, with each one's last batch (not only the partition that landed last).
    (summary,) = [
        e.event_specific_data.asset_observation  # type: ignore[union-attr]
        for e in result.all_events
        if e.event_type_value == "ASSET_OBSERVATION"
    ]
    assert summary.partition is None
    assert summary.metadata["eventhub/total_lag_events"].value == 0
    assert summary.metadata["eventhub/partition_ids_behind"].value == "none"
    table = summary.metadata["eventhub/partitions"].value
    for pid in sent:
        assert f"| {pid} | {sent[pid] - 1} | 0 | 0 | 0..{sent[pid] - 1} |" in table, table
    per, total, distinct = _sink_counts(env["spark"], env["sink"])
    assert per == sent and total == distinct == sum(sent.values())
    # A second run with nothing new, asked for by a user (launchpad, CLI, backfill),
    # materializes every requested key again (up to date) without numbers that would plot as
    # zero, and writes nothing.
    again = _run(env["defs"](), dagster_instance, tags=RANGE)
    assert again.success
    quiet = _materializations(again)
    assert set(quiet) == {"0", "1", "2", "3"}
    assert all("dagster/row_count" not in m.metadata for m in quiet.values())
    assert all(m.metadata["eventhub/batch"].value.startswith("none") for m in quiet.values())
    # The partition's size, as Dagster means it, is still there (not a zero).
    assert {p: m.metadata["dagster/partition_row_count"].value for p, m in quiet.items()} == sent
    assert _sink_counts(env["spark"], env["sink"])[1] == sum(sent.values())
    # A scheduled run (it carries the runner tag) with nothing new adds no data point at all.
    scheduled = _run(
        env["defs"](max_lag_events=0), dagster_instance, tags={**RANGE, RUNNER_TAG: "1/1"}
    )
    assert scheduled.success and _materializations(scheduled) == {}
    # The lag check ran after the asset step and measured every partition of the hub.
    (check,) = scheduled.get_asset_check_evaluations()
    assert check.passed and check.metadata["eventhub/total_lag_events"].value == 0


def test_lag_check_passes_and_fails_when_it_should(
    env: dict[str, Any], dagster_instance: dg.DagsterInstance
) -> None:
    _fill(env["hub"], events=20)
    defs = env["defs"](max_events_per_partition=5, max_lag_events=10)
    first = _run(defs, dagster_instance, tags=RANGE)
    assert first.success  # the check warns, the run still landed what it read
    (check,) = first.get_asset_check_evaluations()
    assert not check.passed  # 20 sent, 5 read: lag 15 > 10
    assert check.metadata["eventhub/max_lag_events"].value == 15
    assert {
        m.metadata["dagster/partition_row_count"].value for m in _materializations(first).values()
    } == {5}
    second = _run(defs, dagster_instance, tags=RANGE)
    (check,) = second.get_asset_check_evaluations()
    assert check.passed  # 10 read: lag 10 <= 10
    # Each batch adds to the partition's size: 5 + 5 rows now.
    assert {
        m.metadata["dagster/partition_row_count"].value for m in _materializations(second).values()
    } == {10}
    assert check.metadata["eventhub/partition_ids_over_threshold"].value == "none"


def test_replay_from_run_config_rewrites_a_range_and_keeps_the_checkpoint(
    env: dict[str, Any], dagster_instance: dg.DagsterInstance
) -> None:
    sent = _fill(env["hub"])
    defs = env["defs"]()
    assert _run(defs, dagster_instance, tags=RANGE).success
    before = env["store"].list_checkpoints()
    config = {"ops": {"events": {"config": {"replay_ranges": {"1": [2, 5]}}}}}
    replay = _run(defs, dagster_instance, partition_key="1", run_config=config)
    assert replay.success
    md = _materializations(replay)["1"].metadata
    assert md["eventhub/replay"].value.startswith("run config replay")
    assert md["dagster/row_count"].value == 4
    assert env["store"].list_checkpoints() == before
    df = env["spark"].read.parquet(str(env["sink"]))
    replayed = df.where("eh_batch = '1-2-5'").select("sequenceNumber").collect()
    assert sorted(r[0] for r in replayed) == [2, 3, 4, 5]
    assert df.where("partition = '0'").count() == sent["0"]


def test_configuration_error_fails_at_once_with_the_message_and_no_retry(
    env: dict[str, Any], dagster_instance: dg.DagsterInstance
) -> None:
    _fill(env["hub"], events=2)
    # A bad definition fails at load (the config model); a bad run-config override is the
    # configuration error a run meets: it must fail at once, never retried.
    config = {"ops": {"events": {"config": {"max_events_per_partition": 0}}}}
    result = _run(env["defs"](), dagster_instance, partition_key="0", run_config=config)
    assert not result.success
    types = [e.event_type_value for e in result.all_events]
    assert "STEP_UP_FOR_RETRY" not in types  # the RetryPolicy does not retry it
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    info = failure.step_failure_data.user_failure_data  # type: ignore[union-attr]
    assert info is not None and info.description is not None
    assert info.description.startswith("ConfigurationError: ")
    assert "max_events_per_partition" in info.description


def _failed_run(instance: dg.DagsterInstance) -> str:
    @dg.asset
    def crashed_ingest() -> None:
        raise RuntimeError("simulated crash while holding leases")

    result = dg.materialize([crashed_ingest], instance=instance, raise_on_error=False)
    assert not result.success
    return result.run_id


def _hold_all_leases(store: PartitionStore, owner: str, partition_ids: list[str]) -> None:
    """``owner`` holds every lease mid-ingestion: each with a recorded intent [0, 4].

    A live owner's partition with a pending intent is never stolen by balancing (the owner may
    be writing it right now), so only knowing the owner dead can free it before expiry.
    """
    for pid in partition_ids:
        own = store.claim(pid, owner, store.get_ownership(pid))
        assert own is not None
        store.record_intent(own, 0, 4)


@pytest.mark.timeout(300)  # waiting for the 10-minute lease expiry would fail here
def test_leases_of_a_failed_run_are_taken_over_without_waiting_for_expiry(
    env: dict[str, Any], dagster_instance: dg.DagsterInstance
) -> None:
    sent = _fill(env["hub"])
    dead = _failed_run(dagster_instance)
    _hold_all_leases(env["store"], dead, list(env["hub"].partition_ids))
    started = time.monotonic()
    result = _run(env["defs"](lease_expiry_seconds=600), dagster_instance, tags=RANGE)
    elapsed = time.monotonic() - started
    assert result.success, elapsed
    assert set(_materializations(result)) == {"0", "1", "2", "3"}
    owners = env["store"].list_ownership()
    assert all(o.owner_id != dead for o in owners.values())
    # The takeovers are in the run's event log, each naming the hub, partition and owners.
    took = [m for m in _log_lines(dagster_instance, result.run_id) if m.startswith("took hub=")]
    assert len(took) == 4 and all(
        f"owner={result.run_id} from={dead} reason=owner-ended" in m for m in took
    ), took
    per, total, distinct = _sink_counts(env["spark"], env["sink"])
    assert per == sent and total == distinct == sum(sent.values())


def _log_lines(instance: dg.DagsterInstance, run_id: str, level: int | None = None) -> list[str]:
    """The messages the run logged through ``context.log`` (at ``level``, if given)."""
    return [
        e.user_message
        for e in instance.all_logs(run_id)
        if e.dagster_event is None and (level is None or e.level == level)
    ]


@pytest.mark.timeout(420)
def test_a_takeover_from_an_expired_owner_is_in_the_event_log_and_its_replay_in_the_metadata(
    env: dict[str, Any], dagster_instance: dg.DagsterInstance
) -> None:
    """A process that is no Dagster run (a CLI on another host) died holding partition 1 with a
    recorded intent: the run waits for its lease to expire, takes it over, says so in the event
    log (warning level), replays the pending range and marks the replay on the materialization.
    """
    import logging

    sent = _fill(env["hub"])
    crashed = "cli-host-4242-crashed"
    store: PartitionStore = env["store"]
    held = store.claim("1", crashed, None)
    assert held is not None
    store.record_intent(held, 0, 4)
    defs = env["defs"](lease_expiry_seconds=15)
    result = dg.materialize(
        list(defs.assets or []),  # type: ignore[arg-type]
        resources=defs.resources,
        instance=dagster_instance,
        partition_key="1",
        raise_on_error=False,
    )
    assert result.success
    hub = env["hub"].settings().hub_ref().describe()
    warnings = _log_lines(dagster_instance, result.run_id, logging.WARNING)
    took = [m for m in warnings if m.startswith("took hub=")]
    assert len(took) == 1, warnings
    assert took[0].startswith(
        f"took hub={hub} partition=1 owner={result.run_id} from={crashed} reason=expired ("
    )
    assert took[0].endswith(f"its pending range [0, 4] (left by {crashed}) is replayed")
    md = _materializations(result)["1"].metadata
    assert md["eventhub/replay"].value == f"pending range 0..4 left by {crashed}"
    assert md["dagster/row_count"].value == sent["1"]  # the replayed range and the rest, once
    per, total, distinct = _sink_counts(env["spark"], env["sink"])
    assert per == {"1": sent["1"]} and total == distinct == sent["1"]


@pytest.mark.timeout(420)
def test_a_store_unreachable_after_load_is_retried_by_the_retry_policy(
    make_eventhub: Callable[..., Any],
    dagster_instance: dg.DagsterInstance,
    container_name: str,
    tmp_path: Path,
    spark: Any,
    ingest_defs: Callable[..., dg.Definitions],
) -> None:
    """Definitions load (nothing is asked of the store then); the run meets a closed port: a
    retryable StoreUnavailableError, raised as is, so Dagster retries it (STEP_UP_FOR_RETRY)
    until the policy gives up, and no attempt claims or writes anything."""
    from dagster_eventhub_ingest.emulator import azurite as services

    hub = make_eventhub(partitions=1)
    hub.send("0", [b"x"] * 3)
    closed = StoreSettings(
        container=container_name,
        connection_string=services.azurite_connection_string(services.free_port()),
    )
    defs = ingest_defs(hub.settings(), closed, str(tmp_path / "sink"), ["0"])
    result = _run(defs, dagster_instance, partition_key="0")
    assert not result.success
    types = [e.event_type_value for e in result.all_events]
    assert types.count("STEP_UP_FOR_RETRY") == FAST_RETRY.max_retries, types
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    error = failure.step_failure_data.error  # type: ignore[union-attr]
    chain = []  # Dagster's RetryRequestedFromPolicy, caused by what the asset raised
    while error is not None:
        chain.append(error)
        error = error.cause or error.context
    (ours,) = [e for e in chain if e.cls_name == "StoreUnavailableError"]
    assert "did not answer" in ours.message and services.AZURITE_KEY not in ours.message
    assert _materializations(result) == {} and not (tmp_path / "sink").exists()


def test_leases_of_a_live_run_are_not_taken_before_expiry(
    env: dict[str, Any], dagster_instance: dg.DagsterInstance
) -> None:
    """Control for the test above: the same leases, owned by a run that is still running."""
    _fill(env["hub"])
    live = DagsterRun(job_name="events_job", run_id=str(uuid.uuid4()))
    dagster_instance.add_run(live.with_status(dg.DagsterRunStatus.STARTED))
    _hold_all_leases(env["store"], live.run_id, list(env["hub"].partition_ids))
    defs = env["defs"](lease_expiry_seconds=600, run_timeout_seconds=8)
    result = _run(defs, dagster_instance, tags=RANGE)
    assert not result.success
    # Every retry of the policy (tests/support/fixtures/dagster.py: FAST_RETRY) met the same live
    # leases.
    types = [e.event_type_value for e in result.all_events]
    assert types.count("STEP_UP_FOR_RETRY") == FAST_RETRY.max_retries
    assert _materializations(result) == {}
    assert {o.owner_id for o in env["store"].list_ownership().values()} == {live.run_id}


def _cli_env(
    hub: Any, azurite_connection_string: str, container: str, sink: Path, home: Path
) -> dict[str, str]:
    """What a CI job sets for the project's defs.yaml (and a DAGSTER_HOME with telemetry off)."""
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "DAGSTER_DISABLE_TELEMETRY": "1",
        "EVENTHUB_NAME": hub.name,
        "EVENTHUB_CONNECTION_STRING": hub.connection_string,
        "AZURE_STORAGE_CONNECTION_STRING": azurite_connection_string,
        "EHINGEST_CONTAINER": container,
        "EHINGEST_SINK_PATH": str(sink),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }


CLI = [
    str(Path(sys.executable).with_name("dagster")),
    "asset",
    "materialize",
    "-m",
    "dagster_eventhub_ingest.dagster_project.definitions",
    "--select",
    "eventhub_events",
    "--partition-range",
    "0...3",
]


#: How long each `dagster asset materialize` process may take: a cold Spark start alone took
#: 240 s when the CI tiers ran beside each other on 2 cores.
CLI_RUN_SECONDS = 480


# The processes' budget, plus the session's cold Spark start (setup counts) and the checks.
@pytest.mark.timeout(CLI_RUN_SECONDS + 420)
def test_two_concurrent_cli_runs_over_the_same_keys_land_each_event_once(
    make_eventhub: Callable[..., Any],
    azurite_connection_string: str,
    container_name: str,
    tmp_path: Path,
    spark: Any,
) -> None:
    """Two `dagster asset materialize` processes at once, as CI jobs or K scheduled runs do.

    Separate processes (each its own Spark driver), one shared DAGSTER_HOME. In-process runs on
    threads are not an option: Dagster reconfigures logging per run and two runs starting at
    once in one process can deadlock on the logging module's locks.
    """
    hub = make_eventhub(partitions=4)
    sent = _fill(hub, events=40)
    sink = tmp_path / "sink"
    home = tmp_path / "dagster_home"
    env = _cli_env(hub, azurite_connection_string, container_name, sink, home)
    # Create the instance's SQLite storage once, as a deployment's DAGSTER_HOME already has it:
    # two processes creating it at the same moment race on CREATE TABLE (a Dagster limitation,
    # not ours; see docs/dagster.md).
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.get_runs(limit=1)
        instance.get_materialized_partitions(dg.AssetKey("eventhub_events"))
    procs = [
        subprocess.Popen(
            CLI, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for _ in range(2)
    ]
    # One deadline for both (they run side by side), and never a process left behind.
    deadline = time.monotonic() + CLI_RUN_SECONDS
    try:
        outputs = [p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0] for p in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
    for proc, output in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, output[-4000:]
        assert "RUN_SUCCESS" in output
        assert output.count(" ASSET_MATERIALIZATION - ") == 4
        assert "SAS_KEY_VALUE" not in output  # the emulator's key never reaches the logs
        assert hub.connection_string not in output
    key = dg.AssetKey("eventhub_events")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_materialized_partitions(key) == {"0", "1", "2", "3"}
        records = instance.fetch_materializations(key, limit=100).records
    runs = {r.event_log_entry.run_id for r in records}
    assert len(runs) == 2 and len(records) == 8  # both runs materialized all four keys
    written = sum(
        r.event_log_entry.asset_materialization.metadata["dagster/row_count"].value  # type: ignore[union-attr]
        for r in records
        if "dagster/row_count" in r.event_log_entry.asset_materialization.metadata  # type: ignore[union-attr]
    )
    assert written == sum(sent.values())  # the runs split the reading; nothing was read twice
    per, total, distinct = _sink_counts(spark, sink)
    assert per == sent and total == distinct == sum(sent.values())


def _java_seen(proc: subprocess.Popen[str]) -> bool:
    """Watch ``proc``'s process tree until it exits: did a JVM (a Spark driver) ever start?"""
    import psutil

    root = psutil.Process(proc.pid)
    seen = False
    while proc.poll() is None:
        try:
            children = root.children(recursive=True)
        except psutil.Error:
            break
        for child in children:
            try:
                seen = seen or child.name() == "java"
            except psutil.Error:
                continue
        time.sleep(0.05)
    return seen


@pytest.mark.timeout(CLI_RUN_SECONDS + 60)
def test_a_run_with_nothing_to_read_starts_no_jvm(
    make_eventhub: Callable[..., Any],
    azurite_connection_string: str,
    container_name: str,
    tmp_path: Path,
) -> None:
    """`dagster asset materialize` of the project's defs.yaml over a hub with nothing new: the
    PySpark resource starts its session only when there is something to read, so the run
    (and the step's process) never starts a JVM nor imports pyspark, py4j or pyarrow, and the
    partitions are reported up to date."""
    hub = make_eventhub(partitions=4)
    env = _cli_env(hub, azurite_connection_string, container_name, tmp_path / "sink", tmp_path)
    proc = subprocess.Popen(
        reporting_imports("dagster", *CLI[1:]),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.append(proc.stdout.read()))  # type: ignore[union-attr]
    reader.start()
    try:
        java = _java_seen(proc)
        proc.wait(CLI_RUN_SECONDS)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        reader.join(30)
    text = "".join(output)
    assert proc.returncode == 0, text[-4000:]
    assert "RUN_SUCCESS" in text
    assert not java, "a JVM started for a run with nothing to read"
    assert imported(text) == [], "a run with nothing to read imported Spark's modules"
    assert "complete=True events=0 " in text  # the run's report: nothing read
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        materialized = instance.get_materialized_partitions(dg.AssetKey("eventhub_events"))
    assert materialized == {"0", "1", "2", "3"}  # every partition reported up to date
    assert not (tmp_path / "sink").exists()


@pytest.mark.timeout(120)
def test_partition_sensor_adds_the_hub_partitions_to_dynamic_partitions(
    make_eventhub: Callable[..., Any],
    blob_store_settings: StoreSettings,
    dagster_instance: dg.DagsterInstance,
    tmp_path: Path,
    ingest_defs: Callable[..., dg.Definitions],
) -> None:
    hub = make_eventhub(partitions=3)
    defs = ingest_defs(hub.settings(), blob_store_settings, str(tmp_path / "sink"), None)
    sensor = defs.resolve_sensor_def("events_partitions_sync")
    resources = {"events_eventhub": defs.resources["events_eventhub"]}  # type: ignore[index]
    ctx = dg.build_sensor_context(instance=dagster_instance, resources=resources)
    first = sensor.evaluate_tick(ctx)
    (request,) = first.dynamic_partitions_requests
    assert request.partitions_def_name == "events_partitions"
    assert list(request.partition_keys) == ["0", "1", "2"]
    # What the sensor daemon does with the request:
    dagster_instance.add_dynamic_partitions(request.partitions_def_name, request.partition_keys)
    second = sensor.evaluate_tick(
        dg.build_sensor_context(instance=dagster_instance, resources=resources)
    )
    assert not second.dynamic_partitions_requests
    assert second.skip_message == "all 3 hub partitions are known"


@pytest.mark.timeout(120)
def test_lag_sensor_reports_the_check_without_a_run(
    env: dict[str, Any], dagster_instance: dg.DagsterInstance
) -> None:
    sent = _fill(env["hub"], events=7)
    defs = env["defs"](max_lag_events=5)
    sensor = defs.resolve_sensor_def("events_lag")
    resources = {k: defs.resources[k] for k in ("events_eventhub", "events_partition_store")}  # type: ignore[index]
    data = sensor.evaluate_tick(
        dg.build_sensor_context(instance=dagster_instance, resources=resources)
    )
    assert not data.run_requests
    assert data.skip_message and "4 of 4 partitions behind" in data.skip_message
    summary, evaluation = data.asset_events
    assert isinstance(evaluation, dg.AssetCheckEvaluation)
    # The asset-level summary goes out without a run too: an observation of no partition.
    assert isinstance(summary, dg.AssetObservation) and summary.partition is None
    assert summary.metadata["eventhub/partition_ids_behind"].value == "partition ids 0, 1, 2, 3"
    assert "measured by sensor events_lag" in summary.metadata["eventhub/summary"].value
    assert evaluation.check_name == LAG_CHECK_NAME and not evaluation.passed
    md = evaluation.metadata
    assert md["eventhub/total_lag_events"].value == sum(sent.values())
    assert md["eventhub/partitions_behind"].value == 4
    assert md["eventhub/partition_ids_over_threshold"].value == "partition ids 0, 1, 2, 3"


#: The slow test's budget for its two processes, from the late run's start to both ends.
SHARE_TEST_SECONDS = 780


@pytest.mark.slow
# The processes' budget, plus the session's cold Spark start (setup counts) and the checks.
@pytest.mark.timeout(SHARE_TEST_SECONDS + 420)
def test_a_run_leaves_a_starting_run_its_share_of_a_small_backlog(
    make_eventhub: Callable[..., Any],
    azurite_connection_string: str,
    container_name: str,
    tmp_path: Path,
    spark: Any,
) -> None:
    """Two `dagster asset materialize` runs over the same keys, a backlog of one cycle: the
    second is started (Dagster says so) but has not joined the store yet when the first claims
    (held back by the EHINGEST_PAUSE hook, as a slow Spark start or a loaded machine does). The
    first counts it as a peer (``expected_peers``) and claims only its share; the second claims
    the rest when it joins; both read."""
    hub = make_eventhub(partitions=4)
    sent = _fill(hub, events=30)
    sink = tmp_path / "sink"
    home = tmp_path / "dagster_home"
    env = _cli_env(hub, azurite_connection_string, container_name, sink, home)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.get_runs(limit=1)
        instance.get_materialized_partitions(dg.AssetKey("eventhub_events"))

    def spawn(name: str, extra: dict[str, str]) -> subprocess.Popen:
        # The child keeps its own copy of the file descriptor.
        with open(tmp_path / f"{name}.log", "w") as out:
            return subprocess.Popen(
                CLI, cwd=ROOT, env={**env, **extra}, stdout=out, stderr=subprocess.STDOUT
            )

    # The late run joins ~45 s after its body starts: after the first claimed (its start-up
    # takes 10-40 s) and while the first still reads its share (its readers are slowed 40 s).
    late = spawn("late", {"EHINGEST_PAUSE": "before_join:45"})
    first: subprocess.Popen | None = None
    # One deadline for every wait: their sum stays inside the test's timeout.
    deadline = time.monotonic() + SHARE_TEST_SECONDS
    try:
        # The late run is in its asset body (it logged "ingesting"), paused before joining.
        ingesting_by = min(time.monotonic() + 300, deadline)
        while time.monotonic() < ingesting_by:
            assert late.poll() is None, (tmp_path / "late.log").read_text()[-3000:]
            if " ingesting " in (tmp_path / "late.log").read_text():
                break
            time.sleep(0.5)
        first = spawn("first", {"EHINGEST_SLOW_READ_SECONDS": "40"})
        first.wait(max(1.0, deadline - time.monotonic()))
        late.wait(max(1.0, deadline - time.monotonic()))
    finally:
        for proc in (late, first):
            if proc is not None and proc.poll() is None:
                proc.kill()
    for name, proc in (("first", first), ("late", late)):
        assert proc is not None and proc.returncode == 0, (tmp_path / f"{name}.log").read_text()[
            -4000:
        ]
    key = dg.AssetKey("eventhub_events")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_materialized_partitions(key) == {"0", "1", "2", "3"}
        records = instance.fetch_materializations(key, limit=100).records
    read_by: dict[str, set[str]] = {}
    for r in records:
        md = r.event_log_entry.asset_materialization.metadata  # type: ignore[union-attr]
        if md.get("dagster/row_count") is not None and md["dagster/row_count"].value:
            read_by.setdefault(r.event_log_entry.run_id, set()).add(
                str(r.event_log_entry.asset_materialization.partition)  # type: ignore[union-attr]
            )
    assert len(read_by) == 2, read_by  # both runs read a share
    per, total, distinct = _sink_counts(spark, sink)
    assert per == sent and total == distinct == sum(sent.values())
