"""Source to sink on the emulator: the statistics a checkpoint needs match what the SDK sees."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dagster_eventhub_ingest.ops.sinks.read import read_sink
from dagster_eventhub_ingest.ops.sinks.write import write_batch
from dagster_eventhub_ingest.resources.eventhubs_source import (
    PartitionRange,
    ReadOptions,
    plan_read,
    read_eventhubs,
    read_range,
)
from dagster_eventhub_ingest.resources.sink import SinkSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.integration]


@pytest.mark.parametrize("fmt", ["parquet", "deltalake"])
def test_eventhubs_to_sink_stats_and_replay(
    spark: SparkSession, make_eventhub: Callable[..., Any], tmp_path: Path, fmt: str
) -> None:
    hub = make_eventhub(partitions=2)
    hub.send("0", [f"zero-{i}".encode() for i in range(40)])
    hub.send("1", [f"one-{i:03d}".encode() for i in range(25)])
    settings = hub.settings()
    plan = plan_read(
        ReadOptions(
            settings=settings,
            ranges=(PartitionRange("0", 5, 34), PartitionRange("1", 0, 24)),
            max_readers_per_partition=2,
            min_events_per_reader=10,
        )
    )
    sink = SinkSettings(format=fmt, path=str(tmp_path / "out"), partition_by=("partition",))
    result = write_batch(read_eventhubs(spark, plan), sink, plan.intent_ranges())

    reference = {
        pid: [r for b in read_range(settings, rng) for r in b.to_pylist()]
        for pid, rng in (("0", PartitionRange("0", 5, 34)), ("1", PartitionRange("1", 0, 24)))
    }
    for pid, ref in reference.items():
        stats = result.partitions[pid]
        assert stats.events == len(ref) and stats.missing_events == 0
        assert stats.bytes == sum(len(r["body"]) for r in ref)
        assert stats.first_sequence_number == ref[0]["sequenceNumber"]
        assert stats.last_sequence_number == ref[-1]["sequenceNumber"]
        # The checkpoint needs the offset of the last event, exactly as the service gave it.
        assert stats.last_offset == ref[-1]["offset"]
        assert stats.first_enqueued_time == ref[0]["enqueuedTime"]
        assert stats.last_enqueued_time == ref[-1]["enqueuedTime"]

    # A replay of the same intents (e.g. after a crash before the checkpoint) changes nothing.
    write_batch(read_eventhubs(spark, plan), sink, plan.intent_ranges())
    out = read_sink(spark, sink)
    got = sorted((r.partition, r.sequenceNumber, r.body) for r in out.collect())
    want = sorted(
        (pid, r["sequenceNumber"], r["body"]) for pid, ref in reference.items() for r in ref
    )
    assert got == want


def test_deltalake_sink_on_azure_blob_storage(
    spark: SparkSession, azurite_connection_string: str
) -> None:
    """``az://`` with storage_options (account key, endpoint): tasks write through pyarrow's
    Azure filesystem, delta-rs commits and verifies; a rewrite leaves every row once."""
    import uuid

    from azure.storage.blob import BlobServiceClient
    from deltalake import DeltaTable

    from dagster_eventhub_ingest.emulator.azurite import AZURITE_ACCOUNT, AZURITE_KEY
    from tests.support.sink_rows import events, expected, keys

    container = f"sink-{uuid.uuid4().hex[:12]}"
    BlobServiceClient.from_connection_string(azurite_connection_string).create_container(container)
    endpoint = azurite_connection_string.split("BlobEndpoint=")[1].rstrip(";")
    options = {
        "account_name": AZURITE_ACCOUNT,
        "account_key": AZURITE_KEY,
        "endpoint": endpoint,
        "allow_http": "true",
    }
    sink = SinkSettings(
        format="deltalake", path=f"az://{container}/events", storage_options=options
    )
    assert AZURITE_KEY not in repr(sink)
    ranges = {"0": (0, 19), "1": (5, 9)}
    first = write_batch(events(spark, ranges), sink, ranges)
    write_batch(events(spark, ranges), sink, ranges)
    assert first.events == 25 and first.output_location == f"az://{container}/events"
    assert keys(read_sink(spark, sink)) == expected(ranges)
    assert DeltaTable(sink.path, storage_options=options).version() == 2
    blobs = BlobServiceClient.from_connection_string(azurite_connection_string)
    names = [b.name for b in blobs.get_container_client(container).list_blobs()]
    assert any(n.startswith("events/eh_batch=0-0-19/") and n.endswith(".parquet") for n in names)
