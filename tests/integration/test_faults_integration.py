"""Faults on the wire (tests/support/faultproxy.py): the hub dying mid-read, a store response lost.

Each case asserts which part the error names, that nothing moved that should not have, and,
after a clean rerun, the exactly-once claim of ``tests/support/landed.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dagster_eventhub_ingest.ops.sinks.staging import STAGING_PREFIXES
from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
from tests.support.cli import start_ehingest, write_config
from tests.support.faultproxy import FaultProxy
from tests.support.landed import assert_exactly_once, landed_events, sent_events

pytestmark = [pytest.mark.integration]


def _port(conn: str, key: str) -> int:
    match = re.search(key + r"=[a-z]+://127\.0\.0\.1:(\d+)", conn)
    assert match is not None, conn
    return int(match.group(1))


def test_a_checkpoint_whose_response_was_lost_is_reported_as_written(
    azurite_connection_string: str, container_name: str
) -> None:
    from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
    from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
    from dagster_eventhub_ingest.resources.store.records import HubRef
    from dagster_eventhub_ingest.resources.store.settings import StoreSettings

    upstream = _port(azurite_connection_string, "BlobEndpoint")
    with FaultProxy(("127.0.0.1", upstream)) as proxy:
        conn = azurite_connection_string.replace(f":{upstream}/", f":{proxy.port}/")
        settings = StoreSettings(container=container_name, connection_string=conn)
        backend = AzureBlobBackend.from_settings(settings)
        backend.ensure_container(create=True)
        store = PartitionStore(backend, HubRef("ns.example", "hub", "$Default"))
        own = store.claim("0", "me", None)
        assert own is not None
        own = store.record_intent(own, 0, 9)
        proxy.drop_response_after(b"x-ms-meta-ehisequencenumber")
        # Written, answer lost, the client's retry refused (ETag moved): still a success.
        after = store.checkpoint(own, 9, "900")
        assert proxy.dropped, "the fault was not injected"
        assert after.progress is not None and after.progress.sequence_number == 9
        assert after.intent is None
        assert store.list_checkpoints()["0"].sequence_number == 9
        assert store.release(after)  # the lease is still ours: its ETag is the current one
        # A claim whose response is lost is also ours, not a lost race.
        proxy.drop_response_after(b"x-ms-meta-ownerid: again")
        again = store.claim("0", "again", store.get_ownership("0"))
        assert proxy.dropped[-1] == b"x-ms-meta-ownerid: again"
        assert again is not None and again.owner_id == "again"
        backend.close()


@pytest.mark.spark
def test_hub_dying_mid_read_is_a_hub_error_and_a_rerun_lands_every_event_once(
    spark, eventhub_emulator, azurite_connection_string: str, container_name: str, tmp_path: Path
) -> None:
    from dagster_eventhub_ingest.ops.run.entry import run_ingestion
    from dagster_eventhub_ingest.ops.run.settings import IngestSettings
    from dagster_eventhub_ingest.resources.errors import EventHubUnavailableError, SinkError
    from dagster_eventhub_ingest.resources.settings import EventHubSettings
    from dagster_eventhub_ingest.resources.sink import SinkSettings
    from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
    from dagster_eventhub_ingest.resources.store.settings import StoreSettings

    hub = eventhub_emulator.create_hub(partitions=1)
    sent = {"0": [f"event-{i}-".encode() * 20 for i in range(2000)]}  # ~400 KB
    for i in range(0, 2000, 500):
        hub.send("0", sent["0"][i : i + 500])
    out = tmp_path / "out"
    with FaultProxy(("127.0.0.1", eventhub_emulator.port)) as proxy:
        conn = hub.connection_string.replace(f":{eventhub_emulator.port}", f":{proxy.port}")
        cfg = IngestSettings(
            eventhub=EventHubSettings(eventhub_name=hub.name, connection_string=conn),
            store=StoreSettings(
                container=container_name, connection_string=azurite_connection_string
            ),
            sink=SinkSettings(format="parquet", path=str(out)),
            lease_expiry_seconds=15.0,
            receive_timeout_seconds=5.0,
            join_grace_seconds=0.0,
            report_lag_seconds=False,
        )
        # Management calls are a few KB: only the read's stream passes 64 KB, then the hub dies.
        proxy.cut_after_bytes = 64 * 1024
        with pytest.raises(EventHubUnavailableError) as err:
            run_ingestion(cfg, spark, owner_id="first")
        assert proxy.cuts == 1
        assert not isinstance(err.value, SinkError) and err.value.retryable
        assert "writable" not in str(err.value)
        store = PartitionStore(AzureBlobBackend.from_settings(cfg.store), cfg.eventhub.hub_ref())
        own = store.get_ownership("0")
        assert store.list_checkpoints() == {} and own is not None and own.intent is not None
        proxy.dead, proxy.cut_after_bytes = False, None  # the hub is back
        report = run_ingestion(cfg, spark, owner_id="second")
    assert report.complete
    assert_exactly_once(landed_events(out), sent_events(sent))


@pytest.mark.spark
def test_a_driver_killed_mid_write_leaves_staging_that_the_rerun_removes(
    make_eventhub,
    monkeypatch: pytest.MonkeyPatch,
    azurite_connection_string: str,
    container_name: str,
    tmp_path: Path,
) -> None:
    import contextlib
    import os
    import signal
    import subprocess
    import time

    hub = make_eventhub(partitions=2)
    sent = {p: [f"{p}-{i}-".encode() * 12 for i in range(4000)] for p in hub.partition_ids}
    for pid, bodies in sent.items():
        for i in range(0, len(bodies), 500):
            hub.send(pid, bodies[i : i + 500])
    monkeypatch.setenv("STG_EH_CONN", hub.connection_string)
    monkeypatch.setenv("STG_ST_CONN", azurite_connection_string)
    out = tmp_path / "out"
    cfg = write_config(
        tmp_path,
        hub,
        container_name,
        name="run",
        eh_conn_env="STG_EH_CONN",
        store_conn_env="STG_ST_CONN",
        lease_expiry_seconds=None,
    )

    def spawn(name: str) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if k != "EHINGEST_FAULT"}
        return start_ehingest(
            "-v", "run", "--config", str(cfg), "--owner", "n", env=env, log=tmp_path / f"{name}.log"
        )

    def staged() -> list[Path]:
        """Staging holding a batch's directory: Spark's, or the reader tasks' own writer's."""
        return [
            s
            for prefix in STAGING_PREFIXES
            for s in out.glob(f"{prefix}*")
            if any(s.rglob("eh_batch=*"))
        ]

    first = spawn("killed")
    try:
        # Killed like a lost VM while its tasks write into Spark's staging directory.
        while first.poll() is None and not staged():
            time.sleep(0.01)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(first.pid, signal.SIGKILL)
    left = staged()
    assert left, "the kill did not land mid-write: " + (tmp_path / "killed.log").read_text()
    rerun = spawn("rerun")
    try:
        assert rerun.wait(600) == 0, (tmp_path / "rerun.log").read_text()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(rerun.pid, signal.SIGKILL)
    assert "removed staging" in (tmp_path / "rerun.log").read_text()
    assert [s for prefix in STAGING_PREFIXES for s in out.glob(f"{prefix}*")] == []
    assert_exactly_once(landed_events(out), sent_events(sent))


@pytest.mark.spark
@pytest.mark.slow
def test_runs_at_20_percent_throttling_finish_and_land_every_event_once(
    make_eventhub, azurite_connection_string: str, container_name: str, tmp_path: Path
) -> None:
    """Two concurrent ``ehingest run`` processes whose every store request has a one-in-five
    chance of a 429 or 503 (with and without Retry-After): both finish (exit 0), in several
    cycles each, and the sink holds every event once."""
    import os

    import yaml

    from tests.support.faultproxy import HttpFaultProxy

    hub = make_eventhub(partitions=4)
    sent = {p: [f"{p}-{i}-".encode() * 8 for i in range(300)] for p in hub.partition_ids}
    for pid, bodies in sent.items():
        hub.send(pid, bodies)
    out = tmp_path / "out"
    upstream = _port(azurite_connection_string, "BlobEndpoint")
    with HttpFaultProxy(("127.0.0.1", upstream), throttle=0.2, retry_after=0.5, seed=5) as proxy:
        proxy.statuses = (429, 503)
        env = {
            **{k: v for k, v in os.environ.items() if k != "EHINGEST_FAULT"},
            "THR_EH_CONN": hub.connection_string,
            "THR_ST_CONN": azurite_connection_string.replace(f":{upstream}/", f":{proxy.port}/"),
        }
        cfg = tmp_path / "run.yaml"
        cfg.write_text(
            yaml.safe_dump(
                {
                    "eventhub": {
                        "eventhub_name": hub.name,
                        "credential": {"connection_string_env": "THR_EH_CONN"},
                    },
                    "store": {
                        "container": container_name,
                        "credential": {"connection_string_env": "THR_ST_CONN"},
                    },
                    "sink": {"format": "parquet", "path": str(out)},
                    "max_events_per_cycle": 100,
                    "lease_expiry_seconds": 20,
                    "report_lag_seconds": False,
                    "spark": {"master": "local[1]", "conf": {"spark.sql.shuffle.partitions": 1}},
                }
            )
        )
        procs = [
            start_ehingest(
                *("run", "--config", str(cfg), "--owner", f"throttled-{i}", "--no-progress"),
                env=env,
                log=tmp_path / f"run{i}.log",
                own_session=False,
            )
            for i in range(2)
        ]
        codes = [p.wait(600) for p in procs]
        logs = [(tmp_path / f"run{i}.log").read_text() for i in range(2)]
        assert codes == [0, 0], "\n\n".join(log[-3000:] for log in logs)
        assert proxy.throttled >= 10, proxy.throttled
    assert_exactly_once(landed_events(out), sent_events(sent))
