"""The example DAG and the operator under real Airflow 3 (``dag.test()``, its in-line triggerer),
against Azurite, the project's Event Hubs emulator (real azure-eventhub SDK) and a local Spark.
Run by ``scripts/tiers/airflow.sh`` in the venv with the ``airflow`` extra.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from dagster_eventhub_ingest.resources.sink import SinkSettings
from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.settings import StoreSettings
from tests.airflow.conftest import ROOT, connection_env
from tests.support.fixtures.emulator import checkpoint_at_last_event
from tests.support.imports import imported, reporting_imports

pytestmark = [pytest.mark.airflow, pytest.mark.integration, pytest.mark.spark]

EVENTS = 25


def _set_connections(
    monkeypatch: pytest.MonkeyPatch,
    hub: Any,
    store: StoreSettings,
    sink: dict[str, Any],
    eventhub_password: str | None = None,
) -> None:
    monkeypatch.setenv(
        *connection_env(
            "eventhub_default",
            conn_type="azure_eventhub_ingest",
            password=eventhub_password or hub.connection_string,
            schema=hub.name,
        )
    )
    monkeypatch.setenv(
        *connection_env(
            "eventhub_store_default",
            conn_type="azure_eventhub_ingest",
            password=store.connection_string,
            extra={"container": store.container},
        )
    )
    monkeypatch.setenv(
        *connection_env("eventhub_sink_default", conn_type="azure_eventhub_ingest", extra=sink)
    )


@pytest.fixture
def env(
    monkeypatch: pytest.MonkeyPatch,
    make_eventhub: Callable[..., Any],
    blob_store_settings: StoreSettings,
    tmp_path: Path,
) -> dict[str, Any]:
    """A fresh 4-partition hub with EVENTS events per partition, connections pointing at it."""
    hub = make_eventhub(partitions=4)
    sink_path = tmp_path / "sink"
    _set_connections(
        monkeypatch,
        hub,
        blob_store_settings,
        {"format": "parquet", "path": str(sink_path), "spark": {"master": "local[2]"}},
    )
    sent: dict[str, list[str]] = {}
    for pid in hub.partition_ids:
        sent[pid] = [f"p{pid}-e{i}-{os.urandom(3).hex()}" for i in range(EVENTS)]
        hub.send(pid, sent[pid])
    return {
        "hub": hub,
        "sent": sent,
        "sink": SinkSettings(path=str(sink_path)),
        "store": PartitionStore(
            AzureBlobBackend.from_settings(blob_store_settings), hub.settings().hub_ref()
        ),
    }


def _assert_sink_holds_exactly(spark: Any, sink: SinkSettings, sent: dict[str, list[str]]) -> None:
    """Event by event: every sent (partition, sequence number, body) once, nothing else."""
    from dagster_eventhub_ingest.ops.sinks.read import read_sink

    rows = read_sink(spark, sink).select("partition", "sequenceNumber", "body").collect()
    landed = collections.Counter(
        (r["partition"], r["sequenceNumber"], bytes(r["body"]).decode()) for r in rows
    )
    expected = collections.Counter(
        (pid, seq, body) for pid, bodies in sent.items() for seq, body in enumerate(bodies)
    )
    duplicates = {k: n for k, n in landed.items() if n > 1}
    assert not duplicates, f"events landed twice: {sorted(duplicates)[:5]}"
    assert landed == expected, (
        f"missing {sorted(expected - landed)[:5]}, unexpected {sorted(landed - expected)[:5]}"
    )


def _reports(dag_id: str, run_id: str) -> dict[int, dict[str, Any]]:
    """The ingest tasks' XCom return values (the run reports), by map index (-1: unmapped)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(XComModel)
            .filter_by(dag_id=dag_id, run_id=run_id, task_id="ingest", key="return_value")
            .all()
        )
        return {row.map_index: XComModel.deserialize_value(row) for row in rows}


def _states(dr: Any) -> dict[str, tuple[str, int]]:
    return {
        f"{ti.task_id}[{ti.map_index}]": (str(ti.state), ti.try_number)
        for ti in dr.get_task_instances()
    }


def test_example_dag_lands_every_event_once(
    airflow_db: str, env: dict[str, Any], spark: Any
) -> None:
    from dagster_eventhub_ingest.airflow_provider.example_dags.eventhub_ingest import RUNS, dag

    dr = dag.test()
    states = _states(dr)
    assert str(dr.state) == "success", states
    assert states["has_work[-1]"][0] == "success"
    assert [states[f"ingest[{i}]"][0] for i in range(RUNS)] == ["success"] * RUNS

    _assert_sink_holds_exactly(spark, env["sink"], env["sent"])
    cps = env["store"].list_checkpoints()
    assert {p: c.sequence_number for p, c in cps.items()} == {p: EVENTS - 1 for p in env["sent"]}

    reports = _reports(dr.dag_id, dr.run_id)
    assert set(reports) == set(range(RUNS))
    assert sum(r["events"] for r in reports.values()) == EVENTS * len(env["sent"])
    for index, report in reports.items():
        assert report["complete"] is True
        assert report["owner_id"].startswith(f"airflow-eventhub_ingest.ingest-{index}-")
        assert report["owner_id"].endswith("-try1")
        assert set(report["partitions"]) == set(env["sent"])
        assert all(p["lag_events"] == 0 for p in report["partitions"].values())
        text = json.dumps(report)  # what XCom stores: plain JSON, no secret
        assert "SharedAccessKey" not in text and "AccountKey" not in text


def _run_dag_subprocess(logical_date: datetime, fault: str, log: Path) -> tuple[int, str]:
    run_env = {**os.environ, "EHINGEST_FAULT_MID_READ_MAX_S": "0.5"}
    run_env["EHINGEST_FAULT"] = fault
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.airflow._run_dag",
                "test",
                "eventhub_ingest_retry",
                logical_date.isoformat(),
            ],
            cwd=ROOT,
            env=run_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: its Spark JVM is ended with it
        )
        try:
            code = proc.wait(timeout=420)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return code, log.read_text(errors="replace")


@pytest.mark.slow
def test_task_killed_mid_run_then_retried_lands_every_event_once(
    airflow_db: str,
    env: dict[str, Any],
    spark: Any,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The worker running an ingest try dies (SIGKILL while Spark reads and writes); try 2 of the
    same task instance takes its leases over at once (they would expire only after 10 minutes)
    and replays exactly the recorded ranges."""
    logical_date = datetime.now(timezone.utc).replace(microsecond=0)
    code, out = _run_dag_subprocess(logical_date, "mid_read:1", tmp_path / "try1.log")
    assert code == -signal.SIGKILL, out[-3000:]
    pending = {p: o for p, o in env["store"].list_ownership().items() if o.intent is not None}
    assert pending, "the killed try should leave its write-ahead intents behind"
    assert all(o.owner_id.endswith("-try1") for o in pending.values())

    # The scheduler's next step, in this process (its Spark session is already up): try 2.
    from tests.airflow._run_dag import _retry
    from tests.airflow.dags.eventhub_ingest_retry import dag

    capfd.readouterr()
    result = _retry(dag, logical_date)
    out = capfd.readouterr().out
    assert result["state"] == "success", out[-3000:]
    assert result["tis"] == {"ingest[-1]": ["success", 2]}  # try 2 of the same task instance
    assert "left by airflow-eventhub_ingest_retry.ingest-" in out  # replayed try 1's intents
    [report] = _reports(dag.dag_id, result["run_id"]).values()
    assert report["owner_id"].endswith("-try2") and report["events"] == EVENTS * len(env["sent"])

    _assert_sink_holds_exactly(spark, env["sink"], env["sent"])
    cps = env["store"].list_checkpoints()
    assert {p: c.sequence_number for p, c in cps.items()} == {p: EVENTS - 1 for p in env["sent"]}
    owners = env["store"].list_ownership()
    assert all(o.intent is None for o in owners.values())


@pytest.mark.parametrize("broken", ["eventhub", "sink"])
def test_bad_connection_fails_the_task_clearly(
    broken: str,
    airflow_db: str,
    env: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    blob_store_settings: StoreSettings,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from dagster_eventhub_ingest.airflow_provider.example_dags.eventhub_ingest import dag

    hub = env["hub"]
    if broken == "eventhub":
        # A secret plus an EntityPath naming another hub: rejected before anything connects.
        bad = (
            "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=listen;"
            "SharedAccessKey=TOPSECRETVALUE;EntityPath=some-other-hub"
        )
        _set_connections(monkeypatch, hub, blob_store_settings, {"path": "/x"}, bad)
        failing, expected = "has_work[-1]", "Airflow connection 'eventhub_default' (Event Hubs)"
    else:
        _set_connections(monkeypatch, hub, blob_store_settings, {"path": "/x", "table": "t"})
        failing, expected = "ingest[0]", "Airflow connection 'eventhub_sink_default' (sink)"

    dr = dag.test()
    states = _states(dr)
    assert str(dr.state) == "failed", states
    assert states[failing] == ("failed", 1), states  # a configuration error is not retried
    out = capfd.readouterr()
    logs = out.out + out.err
    assert expected in logs
    if broken == "eventhub":
        assert "EntityPath='some-other-hub' differs from eventhub_name" in logs
        assert "TOPSECRETVALUE" not in logs
    else:
        assert "give exactly one of path or table" in logs


def _spawn_dag(
    dag_id: str, logical_date: datetime, log: Path, extra_env: dict[str, str]
) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "EHINGEST_FAULT"}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.airflow._run_dag", "test", dag_id, logical_date.isoformat()],
        cwd=ROOT,
        env={**env, **extra_env},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own group: cleaned up whatever happens
    )


def _result_of(out: str) -> dict[str, Any]:
    [line] = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    return json.loads(line.removeprefix("RESULT "))


def test_a_task_with_nothing_to_read_imports_no_spark(
    airflow_db: str, env: dict[str, Any], blob_store_settings: StoreSettings
) -> None:
    """The ingest task over a hub an earlier run brought up to date, in a fresh process as a
    worker runs it: every partition reported up to date at its checkpoint, nothing read, and
    no pyspark, py4j or pyarrow imported (no JVM either), so a scheduled task that finds nothing
    pays for none of them."""
    checkpoints = checkpoint_at_last_event(env["hub"], blob_store_settings)
    when = datetime(2026, 3, 1, tzinfo=timezone.utc).isoformat()
    done = subprocess.run(
        reporting_imports("tests.airflow._run_dag", "test", "eventhub_ingest_once", when),
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "EHINGEST_FAULT"},
        capture_output=True,
        text=True,
        timeout=420,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    result = _result_of(done.stdout)
    assert result["tis"] == {"ingest[-1]": ["success", 1]}, out[-3000:]
    [report] = _reports("eventhub_ingest_once", result["run_id"]).values()
    assert report["complete"] is True and (report["events"], report["cycles"]) == (0, 0)
    assert {
        pid: (p["up_to_date"], p["checkpoint_sequence_number"])
        for pid, p in report["partitions"].items()
    } == {pid: (True, EVENTS - 1) for pid in checkpoints}
    assert imported(done.stderr) == [], "a task with nothing to read imported Spark's modules"
    assert not Path(env["sink"].path).exists()


@pytest.mark.slow
def test_sigterm_mid_read_stops_the_task_and_another_run_takes_over_at_once(
    airflow_db: str, env: dict[str, Any], spark: Any, tmp_path: Path
) -> None:
    """SIGTERM to the process running the task (what a worker's pod deletion sends; Airflow
    turns it into on_kill): the try stops promptly, fails without leaving a JVM or Python
    worker behind, releases its leases with their intents kept; another DAG run (another owner)
    claims them at once (they would expire after 10 minutes) and lands every event once."""
    import time

    from tests.support.processes import STOPPED_PROMPTLY_SECONDS, spark_processes, still_running

    for pid in env["hub"].partition_ids:  # enough to read for a while, slowed down below
        more = [f"p{pid}-x{i}-{os.urandom(3).hex()}" for i in range(600)]
        env["hub"].send(pid, more)
        env["sent"][pid] += more
    store = env["store"]
    log = tmp_path / "killed.log"
    first = _spawn_dag(
        "eventhub_ingest_once",
        datetime(2026, 2, 1, tzinfo=timezone.utc),
        log,
        {"EHINGEST_SLOW_READ_SECONDS": "1"},
    )
    try:
        deadline = time.monotonic() + 420
        while True:
            assert first.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            intents = [o for o in store.list_ownership().values() if o.intent is not None]
            workers = [p for p in spark_processes(first.pid) if p.name().startswith("python")]
            if intents and workers:
                break
            time.sleep(0.2)
        time.sleep(2)  # the readers are receiving
        tree = spark_processes(first.pid)
        sent_at = time.monotonic()
        os.kill(first.pid, signal.SIGTERM)
        first.wait(STOPPED_PROMPTLY_SECONDS + 15)
        took = time.monotonic() - sent_at
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    out = log.read_text(errors="replace")
    result = _result_of(out)
    assert result["tis"] == {"ingest[-1]": ["failed", 1]}, out[-3000:]
    assert "stopped: the run stopped" in out, out[-3000:]
    assert took < STOPPED_PROMPTLY_SECONDS, (took, out[-3000:])
    assert still_running(tree) == [] and result["left"] == [], (result, out[-2000:])
    print(f"airflow SIGTERM mid-read: the try ended {took:.1f} s after the signal")
    owns = store.list_ownership()
    pending = {p: o for p, o in owns.items() if o.intent is not None}
    assert pending and all(o.is_released for o in owns.values()), owns
    assert all(o.intent.owner_id.endswith("-try1") for o in pending.values())  # type: ignore[union-attr]

    # Another DAG run of the same DAG: a new owner, claiming released leases at once.
    from tests.airflow.dags.eventhub_ingest_once import dag

    dr = dag.test(logical_date=datetime(2026, 2, 2, tzinfo=timezone.utc))
    assert str(dr.state) == "success", _states(dr)
    [report] = _reports(dag.dag_id, dr.run_id).values()
    assert report["complete"] is True
    _assert_sink_holds_exactly(spark, env["sink"], env["sent"])
    assert all(o.intent is None for o in store.list_ownership().values())


def test_a_failure_that_is_not_retried_ends_the_tasks_jvm_before_the_task_does(
    airflow_db: str, env: dict[str, Any], tmp_path: Path
) -> None:
    """A configuration error found while the task's local Spark starts (the sink's layout on
    disk differs from partition_by): the task fails without a retry (AirflowFailException, and
    the DAG allows one retry) and, when its DAG run ends, its process has no JVM or Python
    worker left, so nothing keeps it alive past Airflow's task_success_overtime (a process
    killed for that is retried whatever the task reported)."""
    import time

    from tests.support.processes import spark_processes

    assert env["sink"].path is not None
    (Path(env["sink"].path) / "partition=0" / "eh_batch=0-0-9").mkdir(parents=True)
    log = tmp_path / "fail.log"
    proc = _spawn_dag("eventhub_ingest_retry", datetime(2026, 3, 1, tzinfo=timezone.utc), log, {})
    seen_java = False
    try:
        while proc.poll() is None:
            seen_java = seen_java or any(p.name() == "java" for p in spark_processes(proc.pid))
            time.sleep(0.05)
        proc.wait(420)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    out = log.read_text(errors="replace")
    result = _result_of(out)
    assert result["tis"] == {"ingest[-1]": ["failed", 1]}, out[-3000:]  # not retried
    assert "partitioned by ['partition', 'eh_batch'] on disk" in out, out[-3000:]
    assert seen_java, "the failure should come while the task's Spark starts"
    assert result["left"] == [], result
