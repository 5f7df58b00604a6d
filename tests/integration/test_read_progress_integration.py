"""Live read progress: readers' running counts reach the run's output while Spark reads.

A real ``ehingest run`` (emulator, Azurite, local Spark) whose readers are slowed by the
``EHINGEST_SLOW_READ_SECONDS`` hook: a progress line with 0 < read < range must appear on the
CLI's stderr while no checkpoint has moved yet; the run then lands every event once and leaves
no progress blob behind.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from dagster_eventhub_ingest.resources.errors import ConfigurationError
from dagster_eventhub_ingest.resources.eventhubs_source.progress import ProgressTarget
from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
from dagster_eventhub_ingest.resources.store.records import HubRef
from dagster_eventhub_ingest.resources.store.settings import StoreSettings
from tests.support.cli import CLI, write_config

ROOT = Path(__file__).resolve().parents[2]
READ = re.compile(r"partition (\d+) read (\d+)/(\d+), landed (\d+)/(\d+)")
KEY = "c2VjcmV0LWtleS12YWx1ZQ=="


def _target() -> ProgressTarget:
    store = StoreSettings(
        container="leases",
        connection_string=f"DefaultEndpointsProtocol=http;AccountName=acct;AccountKey={KEY};"
        "BlobEndpoint=http://127.0.0.1:1/acct;",
    )
    return ProgressTarget.for_read(store, HubRef("ns.example", "Hub", "$Default"), "Run/1", "r1", 2)


def test_the_progress_option_round_trips_and_never_shows_the_store_key() -> None:
    target = _target()
    assert target.prefix == "ns.example/hub/$default/progress/run_1/r1/"
    text = target.to_option()
    assert ProgressTarget.from_option(text) == target
    assert KEY not in repr(target)
    with pytest.raises(ConfigurationError) as err:
        ProgressTarget.from_option(text.replace('"prefix"', '"prefx"'))
    assert KEY not in str(err.value) and "progress" in str(err.value)


def test_a_failed_progress_write_is_ignored_and_never_names_the_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from dagster_eventhub_ingest.resources.eventhubs_source.progress import ProgressWriter
    from dagster_eventhub_ingest.resources.ranges import SeqRange

    writer = ProgressWriter(ProgressTarget(_target().store, "p/", 0.01), "0", SeqRange(0, 9))
    time.sleep(0.02)
    with caplog.at_level("DEBUG"):
        writer.update(5)  # nothing listens on port 1: the write fails, quietly
        writer.update(9, final=True)
    assert KEY not in caplog.text


@pytest.mark.integration
@pytest.mark.spark
@pytest.mark.timeout(900)
def test_cli_shows_events_read_of_the_range_before_the_checkpoint_moves(
    make_eventhub, azurite_connection_string: str, container_name: str, tmp_path: Path
) -> None:
    from dagster_eventhub_ingest.resources.settings import EventHubSettings
    from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
    from tests.support.landed import assert_exactly_once, landed_events, sent_events

    hub = make_eventhub(partitions=2)
    sent = {pid: [f"{pid}-{i}-slow".encode() for i in range(120)] for pid in hub.partition_ids}
    for pid, bodies in sent.items():
        hub.send(pid, bodies)
    out = tmp_path / "out"
    path = write_config(
        tmp_path,
        hub,
        container_name,
        name="ehingest",
        prefetch=10,  # 12 receives per partition, each slowed by the hook below
        read_progress_seconds=0.5,
        lease_expiry_seconds=None,
        join_grace_seconds=None,
        spark={"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": 1}},
    )
    env = {
        **os.environ,
        "EH_CONN": hub.connection_string,
        "ST_CONN": azurite_connection_string,
        "EHINGEST_SLOW_READ_SECONDS": "1.5",  # ~18 s of reading per partition
    }
    log = tmp_path / "run.log"
    store = PartitionStore(
        AzureBlobBackend.from_settings(
            StoreSettings(container=container_name, connection_string=azurite_connection_string)
        ),
        EventHubSettings(eventhub_name=hub.name, connection_string=hub.connection_string).hub_ref(),
    )
    with open(log, "w") as err, open(tmp_path / "run.json", "w") as stdout:
        proc = subprocess.Popen(
            [
                *CLI,
                "run",
                "--config",
                str(path),
                "--owner",
                "slow",
            ],
            cwd=ROOT,
            env=env,
            stdout=stdout,
            stderr=err,
            text=True,
        )
        partial: list[tuple[str, int, int]] = []
        try:
            deadline = time.monotonic() + 600
            while proc.poll() is None and time.monotonic() < deadline:
                found = [
                    (m.group(1), int(m.group(2)), int(m.group(3)))
                    for m in READ.finditer(log.read_text())
                ]
                mid = [f for f in found if 0 < f[1] < f[2]]
                if mid and not partial:
                    partial = mid
                    # Seen while reading: no checkpoint may have moved yet.
                    assert store.list_checkpoints() == {}, (mid, store.list_checkpoints())
                time.sleep(0.3)
            proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    assert partial, f"no progress line with 0 < read < range:\n{text[-3000:]}"
    assert all(total == 120 for _, _, total in partial), partial
    # The session start is said while it happens and when it is done, with its duration.
    assert "starting the Spark session:" in text, text[-3000:]
    assert re.search(r"Spark started in \d+\.\d s", text), text[-3000:]
    assert azurite_connection_string not in text and hub.connection_string not in text
    assert_exactly_once(landed_events(out), sent_events(sent))
    # The readers' progress blobs are gone with the read.
    assert store.backend.list(store.hub.prefix("progress")) == []
