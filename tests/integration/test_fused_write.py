"""The run's fused read and write: reader tasks write what they read,
only their commit messages reach the driver, and the commit makes each event visible once.

Real parts: the emulator through the real SDK, Azurite, a local SparkSession, delta-rs.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from dagster_eventhub_ingest.resources.sink import SinkSettings
from tests.support.fixtures.spark import script_in_fresh_jvm
from tests.support.landed import assert_exactly_once, landed_in_sink, sent_events

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _send(hub: Any, sizes: dict[str, int], body_bytes: int = 16) -> dict[str, list[bytes]]:
    sent: dict[str, list[bytes]] = {}
    for pid, n in sizes.items():
        bodies = [f"p{pid}-e{i}-".encode().ljust(body_bytes, b"x") for i in range(n)]
        hub.send(pid, bodies)
        sent[pid] = bodies
    return sent


def _table(sink: SinkSettings) -> Any:
    from deltalake import DeltaTable

    assert sink.path is not None
    return DeltaTable(sink.path)


def _logged_files(sink: SinkSettings) -> set[str]:
    return set(_table(sink).file_uris())


def _files_on_disk(sink: SinkSettings) -> set[str]:
    assert sink.path is not None
    return {str(p) for p in Path(sink.path).rglob("*.parquet")}


def _keys_by_row(sink: SinkSettings) -> dict[tuple[str, int], str]:
    table = _table(sink).to_pyarrow_table(columns=["partition", "sequenceNumber", "eh_batch"])
    rows = zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True)
    return {(str(p), int(s)): k for p, s, k in rows}


def test_a_run_lands_each_event_once_under_the_key_of_its_range(
    spark, make_eventhub, blob_store_settings, tmp_path: Path
) -> None:
    """Two runs of batches of 25 events: every event once, keyed by the batch that read it,
    with the statistics of what landed (the readers' own, carried back by their tasks)."""
    from dagster_eventhub_ingest.ops.run.entry import run_ingestion
    from dagster_eventhub_ingest.ops.run.settings import IngestSettings

    hub = make_eventhub(partitions=2)
    sent = _send(hub, {"0": 40, "1": 30})
    sink = SinkSettings(format="deltalake", path=str(tmp_path / "delta"))
    cfg = IngestSettings(
        eventhub=hub.settings(),
        store=blob_store_settings,
        sink=sink,
        lease_expiry_seconds=10.0,
        receive_timeout_seconds=10.0,
        max_events_per_partition=25,
    )
    first = run_ingestion(cfg, spark, owner_id="a")
    second = run_ingestion(cfg, spark, owner_id="b")
    assert first.complete and second.complete
    assert_exactly_once(landed_in_sink(spark, sink), sent_events(sent))
    ranges = {"0": [(0, 24), (25, 39)], "1": [(0, 24), (25, 29)]}
    for (pid, seq), key in _keys_by_row(sink).items():
        (start, end), *_ = [(s, e) for s, e in ranges[pid] if s <= seq <= e]
        assert key == f"{pid}-{start}-{end}"
    assert (first.events, second.events) == (50, 20)
    p0 = second.partitions["0"]
    assert (p0.first_sequence_number, p0.last_sequence_number, p0.events) == (25, 39, 15)
    assert p0.bytes == sum(len(b) for b in sent["0"][25:])


def test_the_driver_gets_one_small_row_per_reader_and_only_the_commit_shows_files(
    spark, make_eventhub, tmp_path: Path
) -> None:
    """The reader tasks of several readers per partition each send the driver one row (the
    pickled commit message, not the events); running them without a commit (as a failed or
    duplicate attempt does) leaves files no reader sees; a rewrite of the batch replaces it."""
    from dagster_eventhub_ingest.ops.sinks.fused import FusedTask, fused_read
    from dagster_eventhub_ingest.resources.eventhubs_source import (
        PartitionRange,
        ReadOptions,
        ReadPlan,
    )

    hub = make_eventhub(partitions=2)
    sent = _send(hub, {"0": 30, "1": 30}, body_bytes=2048)
    ranges = {"0": (0, 29), "1": (0, 29)}
    options = ReadOptions(
        settings=hub.settings(),
        ranges=tuple(PartitionRange(p, s, e) for p, (s, e) in ranges.items()),
        max_readers_per_partition=3,
        min_events_per_reader=3,
    )
    planned = ReadPlan(options=options, ranges=options.ranges or ()).input_partitions()
    assert len(planned) == 6
    sink = SinkSettings(format="deltalake", path=str(tmp_path / "delta"))

    fused = fused_read(spark, options, sink, ranges)
    assert fused is not None and fused.frame.columns == ["task"]
    rows = fused.frame.collect()  # the tasks run, nothing commits
    tasks: list[FusedTask] = [pickle.loads(r[0]) for r in rows]
    assert len(rows) == len(planned)
    assert max(len(r[0]) for r in rows) < 4096 < sum(len(b) for b in sent["0"]) // 6
    assert sum(t.rows for t in tasks) == 60
    assert sorted(t.read[0] for t in tasks if t.read) == sorted(
        (p.range.partition_id, p.range.start, p.range.end) for p in planned
    )
    orphans = _files_on_disk(sink)
    assert orphans and _table(sink).to_pyarrow_table().num_rows == 0

    result = fused.write()  # its own run of the tasks, then the commit
    assert_exactly_once(landed_in_sink(spark, sink), sent_events(sent))
    assert {p: (s.events, s.bytes) for p, s in result.partitions.items()} == {
        p: (30, sum(len(b) for b in sent[p])) for p in ranges
    }
    again = fused_read(spark, options, sink, ranges)
    assert again is not None
    again.write()
    assert_exactly_once(landed_in_sink(spark, sink), sent_events(sent))
    logged = {f.removeprefix("file://") for f in _logged_files(sink)}
    assert len(logged) == 6 and not logged & orphans  # one file a task, the last write's
    assert set(_keys_by_row(sink).values()) == {"0-0-29", "1-0-29"}


def test_an_expired_head_keeps_the_key_of_the_whole_range(
    spark, make_eventhub, eventhub_emulator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``expired_before``: the readers skip the expired head, the batch keeps the key of the
    whole range (a replay replaces it), and its statistics are what the readers read (nothing
    read back)."""
    import logging

    from dagster_eventhub_ingest.ops.run.ingestor import SparkIngestor
    from tests.support.fixtures.emulator import expired_hub

    hub = expired_hub(make_eventhub, eventhub_emulator)
    sink = SinkSettings(format="deltalake", path=str(tmp_path / "delta"))
    ingestor = SparkIngestor(spark, hub.settings(), sink, receive_timeout_seconds=10.0)
    with caplog.at_level(logging.INFO, logger="dagster_eventhub_ingest.ops.sinks.write"):
        for _ in range(2):
            stats = ingestor.ingest({"0": (0, 19)}, expired_before={"0": 10})["0"]
    assert caplog.text.count("statistics by reader") == 2, caplog.text
    assert (stats.batch_key, stats.events, stats.first_sequence_number) == ("0-0-19", 10, 10)
    assert (stats.last_sequence_number, stats.missing_events) == (19, 10)
    assert stats.bytes == sum(len(f"new-{i}") for i in range(10))
    keys = _keys_by_row(sink)
    assert sorted(keys) == [("0", s) for s in range(10, 20)]
    assert set(keys.values()) == {"0-0-19"}


def test_a_readers_data_loss_is_raised_as_itself_and_nothing_is_committed(
    spark, make_eventhub, eventhub_emulator, tmp_path: Path
) -> None:
    """Events that expired after the run's look (its partition infos say they are there) are
    found by a reader task while it writes: the run gets the reader's DataLossError, with its
    advice, not a sink error; nothing is committed."""
    from dagster_eventhub_ingest.ops.run.ingestor import SparkIngestor
    from dagster_eventhub_ingest.resources.azure.hub_client import PartitionInfo
    from dagster_eventhub_ingest.resources.errors import DataLossError
    from tests.support.fixtures.emulator import expired_hub

    hub = expired_hub(make_eventhub, eventhub_emulator)
    sink = SinkSettings(format="deltalake", path=str(tmp_path / "delta"))
    ingestor = SparkIngestor(spark, hub.settings(), sink, receive_timeout_seconds=10.0)
    stale = {"0": PartitionInfo("0", 0, 19)}  # the run's look from before the events expired
    with pytest.raises(DataLossError, match=r"\[0, 9\] of .* are missing.*on_data_loss"):
        ingestor.ingest({"0": (0, 19)}, partition_infos=stale)
    assert _table(sink).to_pyarrow_table().num_rows == 0


_RETRIED = """
import json, sys
from pathlib import Path
from deltalake import DeltaTable
from dagster_eventhub_ingest.ops.sinks.fused import fused_read
from dagster_eventhub_ingest.resources.eventhubs_source import PartitionRange, ReadOptions
from dagster_eventhub_ingest.resources.settings import EventHubSettings
from dagster_eventhub_ingest.resources.sink import SinkSettings
from dagster_eventhub_ingest.resources.spark.session import local_spark_session
from tests.support.fused_faults import fail_once

connection_string, name, path = sys.argv[1:4]
fail_once()
spark = local_spark_session("ehingest-retry", master="local[2,2]")  # a task may fail once
try:
    options = ReadOptions(
        settings=EventHubSettings(eventhub_name=name, connection_string=connection_string),
        ranges=(PartitionRange("0", 0, 19999),),
        max_readers_per_partition=2,
        min_events_per_reader=1000,
    )
    sink = SinkSettings(format="deltalake", path=path)
    fused = fused_read(spark, options, sink, {"0": (0, 19999)})
    result = fused.write()
    table = DeltaTable(path).to_pyarrow_table(columns=["sequenceNumber"])
    print(json.dumps({
        "events": result.partitions["0"].events,
        "rows": table.num_rows,
        "distinct": len(set(table.column("sequenceNumber").to_pylist())),
        "logged": len(DeltaTable(path).file_uris()),
        "on_disk": len(list(Path(path).rglob("*.parquet"))),
    }))
finally:
    spark.stop()
"""


def test_a_reader_task_that_fails_after_writing_part_of_its_rows_lands_them_once(
    make_eventhub, tmp_path: Path
) -> None:
    """Spark re-runs a reader task whose first attempt wrote a file and failed: the commit
    names only the second attempt's files, so each event is in the table once; the first
    attempt's file stays on disk, in no log."""
    hub = make_eventhub(partitions=1)
    hub.send("0", [f"e{i}".encode() for i in range(20000)])
    out = script_in_fresh_jvm(_RETRIED, hub.connection_string, hub.name, str(tmp_path / "delta"))
    assert out["events"] == out["rows"] == out["distinct"] == 20000
    assert out["on_disk"] > out["logged"] == 2  # the failed attempt's file: on disk only


class _ConnectSession:
    """Stands for a Spark Connect session in the one thing the choice asks of it: its type's
    module (``is_connect_session``)."""


_ConnectSession.__module__ = "pyspark.sql.connect.session"


def test_the_reader_tasks_write_the_sinks_whose_commit_this_process_can_make(
    spark: Any, tmp_path: Path
) -> None:
    """``deltalake`` paths on any session; ``parquet`` paths on the local file system with
    string or long partition columns, where this process is Spark's driver (a Spark Connect
    client need not see a mount the server's executors share); tables and other partition
    types keep the DataFrame write."""
    from dagster_eventhub_ingest.ops.sinks.fused import fuses

    connect: Any = _ConnectSession()
    delta = SinkSettings(format="deltalake", path=str(tmp_path / "d"))
    parquet = SinkSettings(path=str(tmp_path / "p"), partition_by=("partition",))
    assert fuses(delta, spark) and fuses(delta, connect)
    assert fuses(parquet, spark) and not fuses(parquet, connect)
    assert not fuses(SinkSettings(table="events"), spark)
    assert not fuses(SinkSettings(path=str(tmp_path / "t"), partition_by=("enqueuedTime",)), spark)
    assert not fuses(SinkSettings(format="json", path=str(tmp_path / "j")), spark)
