"""Ingestion where users run Spark: a standalone cluster and Spark Connect on it.

The executors' Python has the dependencies and not this project, so each test also proves the
code is shipped. Every Spark driver runs in a subprocess (the CLI, or a Dagster run): one Python
process holds one kind of session, and a crash test kills its process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from azure.storage.blob import ContainerClient

from dagster_eventhub_ingest.emulator.azurite import ROOT
from dagster_eventhub_ingest.emulator.spark_cluster import APP_CONF, spark_env
from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.settings import StoreSettings
from tests.cluster.conftest import Cluster
from tests.support.cli import ehingest, start_ehingest, write_config

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

ENGINES = ["standalone", "connect"]
EVENTS = 25


def _spark_section(cluster: Cluster, engine: str) -> dict[str, Any]:
    if engine == "connect":
        return {"remote": cluster.connect.url()}
    return {"master": cluster.master_url, "conf": dict(APP_CONF)}


def _ehingest(
    cluster: Cluster, config: Path, env: dict[str, str], *args: str, verbose: bool = False
) -> subprocess.CompletedProcess:
    return ehingest(
        *(["-v"] if verbose else []),
        *("run", "--config", str(config), *args),
        env=env,
        base_env=spark_env(cluster.executor_python),
        timeout=600,
    )


def _fill(hub: Any, tag: str, events: int = EVENTS) -> set[tuple[str, int, bytes]]:
    """Send distinct bodies; the expected (partition, sequence number, body) of each event."""
    sent = set()
    for pid in hub.partition_ids:
        bodies = [f"{tag}-{pid}-{i}".encode() for i in range(events)]
        assert hub.send(pid, bodies) == events
        sent |= {(pid, i, body) for i, body in enumerate(bodies)}
    return sent


def _rows(table: Any) -> list[tuple[str, int, bytes]]:
    cols = table.select(["partition", "sequenceNumber", "body"]).to_pydict()
    return list(zip(cols["partition"], cols["sequenceNumber"], cols["body"], strict=True))


def _config(
    tmp_path: Path, hub: Any, container: str, sink: dict[str, Any], spark: dict[str, Any]
) -> Path:
    return write_config(
        tmp_path,
        hub,
        container,
        name="ehingest",
        sink=sink,
        lease_expiry_seconds=30,
        join_grace_seconds=None,
        report_lag_seconds=None,
        receive_timeout_seconds=20,
        spark=spark,
    )


def _checkpoints(conn: str, container: str, hub: Any) -> dict[str, int]:
    store = PartitionStore(
        AzureBlobBackend.from_settings(StoreSettings(container=container, connection_string=conn)),
        hub.settings().hub_ref(),
    )
    return {pid: c.sequence_number for pid, c in store.list_checkpoints().items()}


@pytest.mark.parametrize("engine", ENGINES)
def test_local_sink_path_is_refused_before_any_claim(
    cluster: Cluster,
    engine: str,
    make_eventhub: Any,
    azurite_connection_string: str,
    container_name: str,
    tmp_path: Path,
) -> None:
    hub = make_eventhub(partitions=1)
    sink = {"format": "deltalake", "path": str(tmp_path / "out")}
    config = _config(tmp_path, hub, container_name, sink, _spark_section(cluster, engine))
    env = {"EH_CONN": hub.connection_string, "ST_CONN": azurite_connection_string}
    done = _ehingest(cluster, config, env)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "is a local path, but Spark runs on" in done.stderr
    assert "shared: true" in done.stderr
    # Nothing was claimed: the store's container was never even created.
    container = ContainerClient.from_connection_string(azurite_connection_string, container_name)
    assert not container.exists()
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("engine", ENGINES)
def test_exactly_once_with_a_crash_after_write_then_rerun(
    cluster: Cluster,
    engine: str,
    make_eventhub: Any,
    azurite_connection_string: str,
    container_name: str,
    tmp_path: Path,
) -> None:
    """The run dies after the sink holds the batch and before any checkpoint moves; the
    rerun replays the recorded intent: every event lands once, checkpoints at the last one."""
    from deltalake import DeltaTable

    hub = make_eventhub(partitions=2)
    sent = _fill(hub, engine)
    out = tmp_path / "out"
    sink = {"format": "deltalake", "path": str(out), "shared": True}
    config = _config(tmp_path, hub, container_name, sink, _spark_section(cluster, engine))
    env = {"EH_CONN": hub.connection_string, "ST_CONN": azurite_connection_string}

    crashed = _ehingest(
        cluster, config, {**env, "EHINGEST_FAULT": "after_write:1"}, "--owner", "o1"
    )
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    written = _rows(DeltaTable(str(out)).to_pyarrow_table())
    assert set(written) == sent  # the sink holds the batch ...
    assert _checkpoints(azurite_connection_string, container_name, hub) == {}  # ... no checkpoint

    rerun = _ehingest(cluster, config, env, "--owner", "o1", verbose=True)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "complete" in rerun.stdout
    # The executors' reader tasks wrote the Delta files themselves and sent the driver their
    # commit messages with what they read (dagster_eventhub_ingest.ops.sinks.fused): `reader`
    # statistics on both engines, Spark Connect's server included (it has no accumulators).
    assert "statistics by reader" in rerun.stderr, rerun.stderr[-3000:]
    assert "do not cover the batch" not in rerun.stderr
    rows = _rows(DeltaTable(str(out)).to_pyarrow_table())
    assert len(rows) == len(set(rows)) == len(sent)
    assert sorted(rows) == sorted(sent)  # event by event: partition, sequence number, body
    last = {pid: EVENTS - 1 for pid in hub.partition_ids}
    assert _checkpoints(azurite_connection_string, container_name, hub) == last


def test_code_not_shipped_is_named_as_a_missing_module(
    cluster: Cluster,
    make_eventhub: Any,
    azurite_connection_string: str,
    container_name: str,
    tmp_path: Path,
) -> None:
    """On Spark Connect (a client: no JVM to start), whose server's Python lacks the project."""
    hub = make_eventhub(partitions=1)
    _fill(hub, "noship", events=3)
    sink = {"format": "deltalake", "path": str(tmp_path / "out"), "shared": True}
    spark = {**_spark_section(cluster, "connect"), "ship_code": False}
    config = _config(tmp_path, hub, container_name, sink, spark)
    env = {"EH_CONN": hub.connection_string, "ST_CONN": azurite_connection_string}
    done = _ehingest(cluster, config, env)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "cannot import 'dagster_eventhub_ingest' (ModuleNotFoundError)" in done.stderr
    assert "spark.ehingest.shipCode" in done.stderr
    assert "check that the location" not in done.stderr
    assert _checkpoints(azurite_connection_string, container_name, hub) == {}


@pytest.mark.parametrize("engine", ENGINES)
def test_dagster_materialization_through_the_remote_session(
    cluster: Cluster,
    engine: str,
    make_eventhub: Any,
    azurite_connection_string: str,
    container_name: str,
    tmp_path: Path,
) -> None:
    """Four partitions in one run: the batch's statistics are read back from the Parquet sink
    on the cluster (``split``), through the Connect server too."""
    hub = make_eventhub(partitions=4)
    sent = _fill(hub, f"dagster-{engine}")
    sink = tmp_path / "parquet"
    url = cluster.connect.url() if engine == "connect" else cluster.master_url
    args = {
        "engine": engine,
        "url": url,
        "hub": hub.connection_string,
        "eventhub_name": hub.name,
        "store": azurite_connection_string,
        "container": container_name,
        "sink": str(sink),
        "partitions": list(hub.partition_ids),
    }
    env = {**spark_env(cluster.executor_python), "DAGSTER_DISABLE_TELEMETRY": "1"}
    env.pop("DAGSTER_HOME", None)
    done = subprocess.run(
        [sys.executable, "-m", "tests.cluster.materialize", json.dumps(args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["success"], result["errors"]
    assert result["partitions"] == sorted(hub.partition_ids)
    table = ds.dataset(str(sink), format="parquet", partitioning="hive").to_table()
    rows = [(str(p), s, b) for p, s, b in _rows(table)]
    assert sorted(rows) == sorted(sent) and len(rows) == len(set(rows))
    last = {pid: EVENTS - 1 for pid in hub.partition_ids}
    assert _checkpoints(azurite_connection_string, container_name, hub) == last
    assert os.path.isdir(sink)


def _planner_daemons(cluster: Cluster) -> set[int]:
    """The Python daemons the Connect server started for its sessions' data source planning."""
    import psutil

    def daemon(process: psutil.Process) -> bool:
        try:
            return "pyspark.daemon" in " ".join(process.cmdline())
        except psutil.Error:  # a worker that just ended
            return False

    server = psutil.Process(cluster.connect.proc.pid)
    # A daemon forks its workers: those are not counted (they come and go with the load).
    found = [p for p in server.children(recursive=True) if daemon(p)]
    return {p.pid for p in found if (parent := p.parent()) is not None and not daemon(parent)}


_SHARED = "this run works in the shared Spark Connect session "
_CLOSED = " was closed on the server"


def _session_id(stderr: str) -> str:
    assert _SHARED in stderr, stderr[-3000:]
    return stderr.split(_SHARED, 1)[1].split()[0]


def test_connect_runs_share_a_server_session_and_replace_one_that_was_closed(
    cluster: Cluster,
    make_eventhub: Any,
    azurite_connection_string: str,
    container_name: str,
    tmp_path: Path,
) -> None:
    """Runs of the same code and settings work in one server session, whose Python workers the
    next run finds running; once the server closed it, a run opens its own. Every event lands
    once through all of it."""
    from pyspark.sql.connect.client import ChannelBuilder

    hub = make_eventhub(partitions=2)
    out = tmp_path / "out"
    sink = {"format": "parquet", "path": str(out), "shared": True}
    config = _config(tmp_path, hub, container_name, sink, _spark_section(cluster, "connect"))
    env = {"EH_CONN": hub.connection_string, "ST_CONN": azurite_connection_string}
    sent: set[tuple[str, int, bytes]] = set()

    def run(tag: str) -> str:
        offset = len(sent) // len(hub.partition_ids)  # the hub's sequence numbers go on
        sent.update((pid, seq + offset, body) for pid, seq, body in _fill(hub, tag))
        done = _ehingest(cluster, config, env, verbose=True)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stderr

    first = _session_id(run("first"))
    before = _planner_daemons(cluster)
    second = _session_id(run("second"))
    if second != first:  # the UTC hour turned between them: the next run shares the second's
        first, before = second, _planner_daemons(cluster)
        second = _session_id(run("third"))
    assert second == first
    # The second run's source was created and planned by the Python workers the first started.
    assert _planner_daemons(cluster) == before

    # The server closes the session (its idle timeout, or a release): the next run works in the
    # hour's next one.
    release = (
        "import sys; from pyspark.sql.connect.session import SparkSession; "
        "SparkSession(connection=sys.argv[1]).stop()"
    )
    url = f"{cluster.connect.url()}/;{ChannelBuilder.PARAM_SESSION_ID}={first}"
    subprocess.run(
        [sys.executable, "-c", release, url],
        env=spark_env(cluster.executor_python),
        check=True,
        timeout=120,
    )
    closed = run("after-close")
    assert f"{first}{_CLOSED}" in closed, closed[-3000:]
    assert _session_id(closed) != first

    table = ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    rows = [(str(p), s, b) for p, s, b in _rows(table)]
    assert sorted(rows) == sorted(sent) and len(rows) == len(set(rows))
    last = {pid: len(sent) // len(hub.partition_ids) - 1 for pid in hub.partition_ids}
    assert _checkpoints(azurite_connection_string, container_name, hub) == last


def test_concurrent_connect_runs_in_one_shared_session_land_every_event_once(
    cluster: Cluster,
    make_eventhub: Any,
    azurite_connection_string: str,
    container_name: str,
    tmp_path: Path,
) -> None:
    """Two runs at once, of the same code and settings: one server session, each adding the code
    and registering the source while the other may be reading and writing into the same table
    directory. Each lands its share, every event once."""
    hub = make_eventhub(partitions=4)
    sent = _fill(hub, "together")
    out = tmp_path / "out"
    sink = {"format": "parquet", "path": str(out), "shared": True}
    config = _config(tmp_path, hub, container_name, sink, _spark_section(cluster, "connect"))
    env = {
        **spark_env(cluster.executor_python),
        "EH_CONN": hub.connection_string,
        "ST_CONN": azurite_connection_string,
    }
    args = ("-v", "run", "--config", str(config), "--owner")
    logs = [tmp_path / f"run{i}.log" for i in range(2)]
    runs = [
        start_ehingest(*args, f"o{i}", env=env, log=log, own_session=False)
        for i, log in enumerate(logs)
    ]
    for run, log in zip(runs, logs, strict=True):
        assert run.wait(timeout=600) == 0, log.read_text()[-3000:]
    ids = {_session_id(log.read_text()) for log in logs}
    assert len(ids) == 1 or _hour_turned(), ids
    table = ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    rows = [(str(p), s, b) for p, s, b in _rows(table)]
    assert sorted(rows) == sorted(sent) and len(rows) == len(set(rows))
    last = {pid: EVENTS - 1 for pid in hub.partition_ids}
    assert _checkpoints(azurite_connection_string, container_name, hub) == last


def _hour_turned() -> bool:
    """Whether a UTC hour began in the last ten minutes (runs either side of it do not share)."""
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).minute < 10
