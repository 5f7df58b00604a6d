"""``ehingest run`` and ``ehingest status`` as a user runs them: subprocesses, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
from tests.support.cli import CLI, ehingest, write_config

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(1500)
def test_run_and_status_from_the_command_line(
    make_eventhub, azurite_connection_string: str, container_name: str, tmp_path: Path
) -> None:
    hub = make_eventhub(partitions=2)
    for pid in hub.partition_ids:
        hub.send(pid, [f"{pid}-{i}".encode() for i in range(12)])
    env = {"EH_CONN": hub.connection_string, "ST_CONN": azurite_connection_string}
    path = write_config(
        tmp_path,
        hub,
        container_name,
        name="ehingest",
        max_events_per_partition=10,
        join_grace_seconds=None,
        report_lag_seconds=None,
        spark={"master": "local[1]"},
    )

    done = ehingest("run", "--config", str(path), "--owner", "cli-1", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "complete" in done.stdout and "cli-1" in done.stdout
    assert "SharedAccessKey=" not in done.stdout + done.stderr
    # Nothing alarming on a good run: verifying a batch of two partitions (a glob of two batch
    # directories) made Spark log a FileNotFoundException with ~90 lines of stack every run.
    assert "FileNotFoundException" not in done.stderr and "\tat " not in done.stderr, done.stderr

    status = ehingest("status", "--config", str(path), "--json", env=env)
    assert status.returncode == 0, status.stderr[-3000:]
    rows = {r["partition_id"]: r for r in json.loads(status.stdout)}
    assert rows["0"]["checkpoint"] == 9 and rows["0"]["last_enqueued_sequence_number"] == 11
    assert rows["0"]["lag_events"] == 2 and rows["0"]["lag_seconds"] is not None
    assert rows["1"]["owner"] == "" and rows["1"]["intent"] is None
    table = ehingest("status", "--config", str(path), env=env)
    assert table.returncode == 0 and table.stdout.splitlines()[0].split()[:3] == [
        "partition",
        "owner",
        "checkpoint",
    ]

    # --json: the report for scripts and Airflow; progress went to stderr as plain lines.
    rest = ehingest("run", "--config", str(path), "--owner", "cli-2", "--json", env=env)
    assert rest.returncode == 0, rest.stderr[-3000:]
    data = json.loads(rest.stdout)
    assert data["complete"] is True and data["owner_id"] == "cli-2" and data["events"] == 4
    assert data["partitions"]["0"]["checkpoint_sequence_number"] == 11
    assert data["partitions"]["1"]["first_sequence_number"] == 10
    # Its phases end with the stop of the session and JVM it started, before it exits.
    assert list(data["phases"])[-1] == "spark_stop" and "spark_start" in data["phases"]
    assert "progress 0%: snapshot: 0/4 events landed" in rest.stderr
    assert (
        "progress 100%: finished: 4/4 events landed of this run's share (partitions 0, 1); "
        "partition 0 landed 2/2; partition 1 landed 2/2; 2/2 partitions up to date"
    ) in rest.stderr

    unknown = ehingest("run", "--config", str(path), "--partition", "7", env=env)
    assert unknown.returncode == 2 and "valid partition ids: 0, 1" in unknown.stderr

    config = yaml.safe_load(path.read_text())
    config["store"]["connection_string"] = azurite_connection_string  # a literal secret
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    refused = ehingest("run", "--config", str(bad), env=env)
    assert refused.returncode == 2
    assert "store.connection_string: the config file holds a literal secret" in refused.stderr
    assert "Eby8vdM02" not in refused.stderr


def _small_run(
    hub: Any, store_conn: str, container: str, tmp_path: Path, sink_format: str, events: int
) -> tuple[Path, dict[str, str]]:
    """``events`` per partition of ``hub``, and a config file (local[1], a sink under
    ``tmp_path/out``) with the environment it reads."""
    for pid in hub.partition_ids:
        hub.send(pid, [f"{pid}-{i}".encode() for i in range(events)])
    path = write_config(
        tmp_path,
        hub,
        container,
        name="ehingest",
        sink={"format": sink_format, "path": str(tmp_path / "out")},
        lease_expiry_seconds=None,
        join_grace_seconds=None,
        report_lag_seconds=None,
        spark={"master": "local[1]"},
    )
    return path, {"EH_CONN": hub.connection_string, "ST_CONN": store_conn}


def test_run_and_status_exit_with_the_same_code_for_the_same_corrupt_state(
    make_eventhub, azurite_connection_string: str, container_name: str, tmp_path: Path
) -> None:
    """A checkpoint blob edited by hand: both commands name the blob and exit 2 (retrying
    cannot help), and neither writes anything."""
    from azure.storage.blob import BlobServiceClient

    from dagster_eventhub_ingest.cli.exit_codes import EXIT_CONFIG

    hub = make_eventhub(partitions=2)
    path, env = _small_run(hub, azurite_connection_string, container_name, tmp_path, "parquet", 3)
    service = BlobServiceClient.from_connection_string(azurite_connection_string)
    container = service.get_container_client(container_name)
    container.create_container()
    name = hub.settings().hub_ref().prefix("checkpoint") + "1"
    container.upload_blob(name, b"", metadata={"sequencenumber": "twelve", "offset": "0"})
    before = {b.name: b.etag for b in container.list_blobs()}

    run = ehingest("run", "--config", str(path), "--owner", "corrupt", env=env)
    status = ehingest("status", "--config", str(path), env=env)
    for done in (run, status):
        assert done.returncode == EXIT_CONFIG, done.stderr[-3000:]
        assert "CorruptStoreStateError" in done.stderr and repr(name) in done.stderr
        assert "retrying cannot help" in done.stderr and "Traceback" not in done.stderr
    assert {b.name: b.etag for b in container.list_blobs()} == before
    assert not (tmp_path / "out").exists()


def test_an_unknown_spark_data_source_is_a_config_error_before_any_claim(
    make_eventhub, azurite_connection_string: str, container_name: str, tmp_path: Path
) -> None:
    from azure.storage.blob import BlobServiceClient

    hub = make_eventhub(partitions=2)
    path, env = _small_run(
        hub, azurite_connection_string, container_name, tmp_path, "com.example.NoSuchSource", 5
    )
    done = ehingest("run", "--config", str(path), "--owner", "probe", env=env)
    assert done.returncode == 2, done.stderr[-3000:]
    err = done.stderr
    assert "sink format 'com.example.NoSuchSource'" in err and "no data source" in err
    assert "nothing was claimed or written" in err and "fully qualified class name" in err
    assert "Traceback" not in err, err
    # Not one blob: no heartbeat, no lease, no intent.
    service = BlobServiceClient.from_connection_string(azurite_connection_string)
    container = service.get_container_client(container_name)
    assert not container.exists() or list(container.list_blobs()) == []
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_two_concurrent_runs_over_the_same_partitions_split_the_work(
    make_eventhub, azurite_connection_string: str, container_name: str, tmp_path: Path
) -> None:
    """Two real ``ehingest run`` processes over the same 4 partitions, the second started while
    the first reads: with batches of max_events_per_cycle, the first releases its leases between
    batches and claims only its share, so both read events; every event lands once.

    A lone run grows its cycles (dagster_eventhub_ingest.ops.run.plan.cycle_size: 30, 30, 120 here),
    so the first's readers are slowed (2 s per received batch, ~8 s per cycle on local[1]) to keep
    it reading while the second starts, as a slower source or a bigger backlog would."""
    from dagster_eventhub_ingest.resources.settings import EventHubSettings
    from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
    from dagster_eventhub_ingest.resources.store.settings import StoreSettings
    from tests.support.landed import assert_exactly_once, landed_events, sent_events

    hub = make_eventhub(partitions=4)
    sent = {pid: [f"{pid}-{i}-share".encode() * 4 for i in range(120)] for pid in hub.partition_ids}
    for pid, bodies in sent.items():
        for i in range(0, len(bodies), 100):
            hub.send(pid, bodies[i : i + 100])
    env = {"EH_CONN": hub.connection_string, "ST_CONN": azurite_connection_string}
    out = tmp_path / "out"
    path = write_config(
        tmp_path,
        hub,
        container_name,
        name="ehingest",
        strategy="balanced",
        max_events_per_cycle=30,
        join_grace_seconds=None,
    )

    def spawn(owner: str, extra: dict[str, str] | None = None) -> subprocess.Popen:
        # Files, not pipes: a peer blocked on a full pipe would hold its leases forever.
        return subprocess.Popen(
            [
                *CLI,
                "run",
                "--config",
                str(path),
                "--owner",
                owner,
                "--json",
            ],
            cwd=ROOT,
            env={**os.environ, **env, **(extra or {})},
            stdout=open(tmp_path / f"{owner}.json", "w"),
            stderr=open(tmp_path / f"{owner}.log", "w"),
            text=True,
        )

    first = spawn("share-a", {"EHINGEST_SLOW_READ_SECONDS": "2"})
    second: subprocess.Popen | None = None
    try:
        # Start the second once the first has checkpointed its first batch (it is reading).
        ps = PartitionStore(
            AzureBlobBackend.from_settings(
                StoreSettings(container=container_name, connection_string=azurite_connection_string)
            ),
            EventHubSettings(
                eventhub_name=hub.name, connection_string=hub.connection_string
            ).hub_ref(),
        )
        deadline = time.monotonic() + 180
        while not ps.list_checkpoints() and time.monotonic() < deadline:
            assert first.poll() is None, (tmp_path / "share-a.log").read_text()[-3000:]
            time.sleep(0.2)
        second = spawn("share-b")
        first.wait(400)
        second.wait(400)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
    a_err = (tmp_path / "share-a.log").read_text()
    b_err = (tmp_path / "share-b.log").read_text()
    a_out = (tmp_path / "share-a.json").read_text()
    b_out = (tmp_path / "share-b.json").read_text()
    assert first.returncode == 0, a_err[-3000:]
    assert second.returncode == 0, b_err[-3000:]
    a, b = json.loads(a_out), json.loads(b_out)
    assert a["complete"] and b["complete"]
    assert a["events"] > 0 and b["events"] > 0, (a["events"], b["events"])
    assert a["events"] + b["events"] == 480
    assert_exactly_once(landed_events(out), sent_events(sent))


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_two_runs_a_few_seconds_apart_split_a_small_backlog(
    make_eventhub, azurite_connection_string: str, container_name: str, tmp_path: Path
) -> None:
    """A backlog far below max_events_per_cycle (one cycle each), the second run started
    after the first claimed every partition: the first starts Spark before it records its
    intents (slowed here by the EHINGEST_PAUSE hook, as a cold cluster start is), so the
    second takes its share of the not yet started leases meanwhile; both read, each event
    lands once."""
    from dagster_eventhub_ingest.resources.settings import EventHubSettings
    from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
    from dagster_eventhub_ingest.resources.store.settings import StoreSettings
    from tests.support.landed import assert_exactly_once, landed_events, sent_events

    hub = make_eventhub(partitions=4)
    sent = {pid: [f"{pid}-{i}-small".encode() for i in range(25)] for pid in hub.partition_ids}
    for pid, bodies in sent.items():
        hub.send(pid, bodies)
    env = {"EH_CONN": hub.connection_string, "ST_CONN": azurite_connection_string}
    out = tmp_path / "out"
    path = write_config(
        tmp_path,
        hub,
        container_name,
        name="ehingest",
        strategy="balanced",
        lease_expiry_seconds=30,
        join_grace_seconds=None,
    )

    def spawn(owner: str, extra: dict[str, str]) -> subprocess.Popen:
        args = ["run", "--config", str(path), "--owner", owner, "--json"]
        return subprocess.Popen(
            [*CLI, *args],
            cwd=ROOT,
            env={**os.environ, **env, **extra},
            stdout=open(tmp_path / f"{owner}.json", "w"),
            stderr=open(tmp_path / f"{owner}.log", "w"),
            text=True,
        )

    ps = PartitionStore(
        AzureBlobBackend.from_settings(
            StoreSettings(container=container_name, connection_string=azurite_connection_string)
        ),
        EventHubSettings(eventhub_name=hub.name, connection_string=hub.connection_string).hub_ref(),
    )
    first = spawn("small-a", {"EHINGEST_PAUSE": "spark_start:20"})
    second: subprocess.Popen | None = None
    try:
        # The first holds every partition, no intent recorded yet: it is starting Spark.
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert first.poll() is None, (tmp_path / "small-a.log").read_text()[-3000:]
            owns = ps.list_ownership()
            if len(owns) == 4 and all(o.owner_id == "small-a" for o in owns.values()):
                assert all(o.intent is None for o in owns.values())
                break
            time.sleep(0.2)
        second = spawn("small-b", {})
        first.wait(600)
        second.wait(600)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
    for owner, proc in (("small-a", first), ("small-b", second)):
        assert proc is not None and proc.returncode == 0, (tmp_path / f"{owner}.log").read_text()[
            -3000:
        ]
    a = json.loads((tmp_path / "small-a.json").read_text())
    b = json.loads((tmp_path / "small-b.json").read_text())
    assert a["complete"] and b["complete"]
    read_a = {p for p, r in a["partitions"].items() if r["events"]}
    read_b = {p for p, r in b["partitions"].items() if r["events"]}
    assert read_a and read_b and not read_a & read_b, (read_a, read_b)
    assert a["events"] + b["events"] == 100
    assert_exactly_once(landed_events(out), sent_events(sent))
