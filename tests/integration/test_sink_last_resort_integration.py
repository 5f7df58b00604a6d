"""Lost store state, a lost lease and a full disk, against Azurite, the emulator and Spark.

* The checkpoint deleted (the SDK blob, and the fenced copy on the ownership blob: what the
  corrupt-state message suggests) used to restart the partition at its first event and land
  what the sink held a second time (55 duplicates, exit 0). The sink is the checkpoint of last
  resort: the run continues after what it holds, for every kind of sink.
* A copy whose store went away past its lease's expiry used to replay its partition into the
  sink after another owner took it over ("lease lost ... drops the partition", then a write).
* A full disk said "retrying cannot help" (exit 2); freeing space does help (exit 3).
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
from tests.support.cli import CLI, ehingest, load_ingest, sink_block, write_config
from tests.support.faultproxy import FaultProxy
from tests.support.landed import assert_exactly_once, landed_in_sink, send_tagged, sent_events

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]


def _forget_checkpoints(conn: str, container: str, hub: Any) -> None:
    """Delete the SDK checkpoint blobs and drop the fenced copies from the ownership blobs."""
    from dagster_eventhub_ingest.resources.store.settings import StoreSettings

    backend = AzureBlobBackend.from_settings(
        StoreSettings(container=container, connection_string=conn)
    )
    ref = hub.settings().hub_ref()
    for record in backend.list(ref.prefix("checkpoint")):
        backend.delete(record.name)
    for record in backend.list(ref.prefix("ownership")):
        kept = {
            k: v for k, v in record.metadata.items() if k not in ("ehisequencenumber", "ehioffset")
        }
        backend.put(record.name, kept, etag=record.etag)
    backend.close()


@pytest.mark.parametrize("fmt", ["parquet", "deltalake", "table"])
def test_a_deleted_checkpoint_continues_after_what_the_sink_holds(
    spark, make_eventhub, azurite_connection_string: str, container_name: str, tmp_path, fmt
) -> None:
    from dagster_eventhub_ingest.ops.run.entry import run_ingestion
    from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore

    hub = make_eventhub(partitions=2)
    sent: dict[str, list[bytes]] = {}
    send_tagged(hub, sent, 55, "before")
    env = {"EH_CONN": hub.connection_string, "ST_CONN": azurite_connection_string}
    config = load_ingest(
        write_config(tmp_path, hub, container_name, sink=sink_block(fmt, tmp_path)), env
    )
    assert run_ingestion(config, spark, owner_id="first").complete
    _forget_checkpoints(azurite_connection_string, container_name, hub)
    store = PartitionStore(AzureBlobBackend.from_settings(config.store), config.eventhub.hub_ref())
    assert store.list_checkpoints() == {}
    send_tagged(hub, sent, 20, "after")
    report = run_ingestion(config, spark, owner_id="second")
    assert report.complete and report.events == 40  # 55..74 of each partition, nothing else
    assert_exactly_once(landed_in_sink(spark, config.sink), sent_events(sent))
    for pid in hub.partition_ids:
        note = report.partitions[pid].checkpoint_reset or ""
        assert "moved from None to 54" in note and "already holds [0, 54]" in note
        assert report.partitions[pid].checkpoint_sequence_number == 74
    # The offset recorded is the one of event 54 as the sink holds it (an SDK processor
    # resumes from it), and the store says what happened.
    assert store.list_sdk_checkpoints()["0"].offset not in (None, "", "-1")


def test_a_checkpoint_restored_from_an_older_copy_lands_nothing_twice_through_the_cli(
    make_eventhub, azurite_connection_string: str, container_name: str, tmp_path
) -> None:
    """The store put back from a copy taken after the first run: checkpoints at 9, the sink at
    29. ``ehingest run`` continues at 30 and says so; ``status`` shows the move."""
    from dagster_eventhub_ingest.resources.store.settings import StoreSettings
    from tests.support.landed import landed_events

    hub = make_eventhub(partitions=1)
    sent: dict[str, list[bytes]] = {}
    send_tagged(hub, sent, 30, "x")
    env = {"EH_CONN": hub.connection_string, "ST_CONN": azurite_connection_string}
    config = write_config(
        tmp_path,
        hub,
        container_name,
        sink=sink_block("parquet", tmp_path),
        max_events_per_partition=10,
    )
    backend = AzureBlobBackend.from_settings(
        StoreSettings(container=container_name, connection_string=azurite_connection_string)
    )
    saved: dict[str, dict[str, str]] = {}
    for i in range(3):
        done = ehingest("run", "--config", str(config), "--owner", f"r{i}", env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        if i == 0:
            saved = {r.name: dict(r.metadata) for r in backend.list("")}
    for name, metadata in saved.items():  # the older copy back in place
        current = backend.get(name)
        backend.put(name, metadata, etag=current.etag if current else None)
    send_tagged(hub, sent, 5, "y")
    done = ehingest("run", "--config", str(config), "--owner", "after", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "partition 0: checkpoint moved from 9 to 29" in done.stdout, done.stdout
    assert_exactly_once(landed_events(tmp_path / "out"), sent_events(sent))
    status = ehingest("status", "--config", str(config), "--json", env=env)
    row = json.loads(status.stdout)[0]
    assert row["checkpoint"] == 34 and "already holds [10, 29]" in row["checkpoint_reset"]
    backend.close()


@pytest.mark.slow
def test_a_copy_that_lost_its_lease_in_a_store_outage_does_not_write_the_partition(
    spark, make_eventhub, azurite_connection_string: str, container_name: str, tmp_path
) -> None:
    """Copy A reaches the store through a proxy that goes dead while A is between claiming a
    pending intent and writing it (held there by EHINGEST_PAUSE, as a slow or stalled process
    is). Copy B takes the expired lease, replays the intent, checkpoints. The store comes back;
    A's renewer logs the lost lease; A must not write the partition over B's batch."""
    from dagster_eventhub_ingest.ops.run.entry import run_ingestion
    from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
    from dagster_eventhub_ingest.resources.store.settings import StoreSettings

    hub = make_eventhub(partitions=1)
    sent: dict[str, list[bytes]] = {}
    send_tagged(hub, sent, 30, "x")
    settings = StoreSettings(container=container_name, connection_string=azurite_connection_string)
    store = PartitionStore(AzureBlobBackend.from_settings(settings), hub.settings().hub_ref())
    store.backend.ensure_container(create=True)  # type: ignore[attr-defined]
    crashed = store.claim("0", "crashed", None)
    assert crashed is not None
    store.release(store.record_intent(crashed, 0, 29))  # a pending intent, lease free
    sink = sink_block("parquet", tmp_path)
    found = re.search(r"BlobEndpoint=http://127\.0\.0\.1:(\d+)", azurite_connection_string)
    assert found is not None
    upstream = int(found[1])
    with FaultProxy(("127.0.0.1", upstream)) as proxy:
        proxied = azurite_connection_string.replace(f":{upstream}/", f":{proxy.port}/")
        env = {"EH_CONN": hub.connection_string, "ST_CONN": azurite_connection_string}
        config_a = write_config(
            tmp_path,
            hub,
            container_name,
            sink=sink,
            store_conn_env="ST_PROXIED",
            lease_expiry_seconds=9,
        )
        log = (tmp_path / "a.log").open("wb")
        a = subprocess.Popen(
            [
                *(*CLI, "-v", "run"),
                *("--config", str(config_a), "--owner", "copy-a"),
            ],
            cwd=ROOT,
            env={**os.environ, **env, "ST_PROXIED": proxied, "EHINGEST_PAUSE": "after_intent:60"},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 120
            while b"pausing 60.0 s at step after_intent" not in (tmp_path / "a.log").read_bytes():
                assert a.poll() is None and time.monotonic() < deadline, (
                    tmp_path / "a.log"
                ).read_text()[-3000:]
                time.sleep(0.2)
            own = store.get_ownership("0")
            assert own is not None and own.owner_id == "copy-a"
            proxy.dead = True  # A's store goes away; its lease expires on the store's clock
            config_b = load_ingest(
                write_config(tmp_path, hub, container_name, sink=sink, lease_expiry_seconds=9),
                env,
            )
            report = run_ingestion(config_b, spark, owner_id="copy-b")
            assert report.complete and report.partitions["0"].replayed_intents == [
                (0, 29, "crashed")
            ]
            batch = tmp_path / "out" / "eh_batch=0-0-29"
            written_by_b = sorted(p.name for p in batch.iterdir())
            proxy.dead = False  # the store is back: A's next renewal finds the lease taken
            assert a.wait(timeout=180) == 0, (tmp_path / "a.log").read_text()[-3000:]
        finally:
            if a.poll() is None:
                a.kill()
                a.wait()
            log.close()
    out = (tmp_path / "a.log").read_text()
    assert "lease lost" in out and "not writing partition 0" in out, out[-3000:]
    assert "wrote 30 events" not in out
    assert sorted(p.name for p in batch.iterdir()) == written_by_b  # B's batch untouched
    assert_exactly_once(landed_in_sink(spark, config_b.sink), sent_events(sent))
    assert store.list_checkpoints()["0"].sequence_number == 29
    store.backend.close()  # type: ignore[attr-defined]


_FULL_DISK = """
set -u
mount -t tmpfs -o size=24m tmpfs "$DISK"
head -c 23M /dev/zero > "$DISK/filler"
"$PYTHON" -m dagster_eventhub_ingest.cli.main run --config "$CONFIG" --owner full >"$DISK.1" 2>&1
echo "first=$?"
rm "$DISK/filler"
"$PYTHON" -m dagster_eventhub_ingest.cli.main run --config "$CONFIG" --owner freed >"$DISK.2" 2>&1
echo "second=$?"
"$PYTHON" - <<'EOF'
import collections, hashlib, json, os
from dagster_eventhub_ingest.resources.sink import SinkSettings
sink = json.loads(os.environ["SINK"])
if sink["format"] == "deltalake":
    from deltalake import DeltaTable
    table = DeltaTable(sink["path"]).to_pyarrow_table()
else:
    import pyarrow.parquet as pq
    table = pq.read_table(sink["path"])
rows = collections.Counter(
    (str(p), int(s), hashlib.sha256(b).hexdigest())
    for p, s, b in zip(
        table.column("partition").to_pylist(),
        table.column("sequenceNumber").to_pylist(),
        table.column("body").to_pylist(),
    )
)
print("landed=" + json.dumps([[*k, n] for k, n in rows.items()]))
EOF
"""


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["parquet", "deltalake"])
def test_a_full_disk_is_retryable_and_the_run_after_freeing_space_lands_every_event_once(
    make_eventhub, azurite_connection_string: str, container_name: str, tmp_path, fmt
) -> None:
    """The sink on a 24 MB disk of its own (tmpfs in a private mount namespace, gone with it),
    23 MB taken: a batch of ~3 MB does not fit. Exit 3 (retryable), then, with the space
    freed, exit 0 and every event once."""
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed to give the sink a disk of its own")
    hub = make_eventhub(partitions=1)
    sent: dict[str, list[bytes]] = {}
    bodies = [os.urandom(10_000) for _ in range(300)]  # incompressible
    for i in range(0, 300, 100):
        hub.send("0", bodies[i : i + 100])
    sent["0"] = bodies
    disk = tmp_path / "disk"
    disk.mkdir()
    sink = {"format": fmt, "path": str(disk / "out")}
    config = write_config(tmp_path, hub, container_name, sink=sink)
    done = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", _FULL_DISK],
        cwd=ROOT,
        env={
            **os.environ,
            "EH_CONN": hub.connection_string,
            "ST_CONN": azurite_connection_string,
            "DISK": str(disk),
            "CONFIG": str(config),
            "SINK": json.dumps(sink),
            "PYTHON": sys.executable,
        },
        capture_output=True,
        text=True,
        timeout=600,
    )
    first, second = (Path(f"{disk}.{i}").read_text() for i in (1, 2))
    assert "first=3" in done.stdout, first[-3000:] + done.stderr[-2000:]
    assert "the disk is full" in first, first[-3000:]
    assert "second=0" in done.stdout, second[-3000:]
    landed = json.loads(done.stdout.split("landed=", 1)[1].splitlines()[0])
    got = collections.Counter({tuple(k[:3]): k[3] for k in landed})
    assert_exactly_once(got, sent_events(sent))
