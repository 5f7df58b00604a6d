"""The ingestion run end to end: emulator (real SDK), Azurite store, local Spark, real sink."""

from __future__ import annotations

import dataclasses
import hashlib
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dagster_eventhub_ingest.ops.run.entry import run_ingestion
from dagster_eventhub_ingest.ops.run.settings import IngestSettings, ReplaySettings
from dagster_eventhub_ingest.ops.sinks.read import read_sink
from dagster_eventhub_ingest.resources.errors import (
    DataLossError,
    EventHubUnavailableError,
    RangeError,
    SinkError,
)
from dagster_eventhub_ingest.resources.settings import EventHubSettings
from dagster_eventhub_ingest.resources.sink import SinkSettings
from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.settings import StoreSettings

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def sink_rows(spark, sink: SinkSettings) -> list[tuple[str, int, str]]:
    """(partition, sequence number, sha256 of body) of every row in the sink, sorted."""
    rows = read_sink(spark, sink).select("partition", "sequenceNumber", "body").collect()
    return sorted((r[0], r[1], hashlib.sha256(r[2]).hexdigest()) for r in rows)


def sent_rows(sent: dict[str, list[bytes]]) -> list[tuple[str, int, str]]:
    return sorted(
        (pid, seq, hashlib.sha256(body).hexdigest())
        for pid, bodies in sent.items()
        for seq, body in enumerate(bodies)
    )


class Hub:
    """A fresh emulated hub plus what was sent to it."""

    def __init__(self, hub) -> None:
        self.hub = hub
        self.sent: dict[str, list[bytes]] = {p: [] for p in hub.partition_ids}

    def send(self, n: int, partitions=None) -> None:
        for pid in partitions or self.hub.partition_ids:
            start = len(self.sent[pid])
            bodies = [f"p{pid}-e{start + i}-".encode() * 3 for i in range(n)]
            self.hub.send(pid, bodies)
            self.sent[pid].extend(bodies)


@pytest.fixture
def hub(make_eventhub) -> Hub:
    return Hub(make_eventhub(partitions=3))


@pytest.fixture
def make_config(
    hub: Hub, blob_store_settings: StoreSettings, tmp_path: Path
) -> Callable[..., IngestSettings]:
    def make(**kw) -> IngestSettings:
        base = dict(
            eventhub=hub.hub.settings(),
            store=blob_store_settings,
            sink=SinkSettings(format="parquet", path=str(tmp_path / "out")),
            lease_expiry_seconds=10.0,
            receive_timeout_seconds=10.0,
        )
        base.update(kw)
        return IngestSettings(**base)  # type: ignore[arg-type]

    return make


def store_of(cfg: IngestSettings) -> PartitionStore:
    return PartitionStore(AzureBlobBackend.from_settings(cfg.store), cfg.eventhub.hub_ref())


def test_one_run_lands_every_partition_once(spark, hub: Hub, make_config) -> None:
    hub.send(40)
    cfg = make_config()
    report = run_ingestion(cfg, spark, owner_id="run-1")
    assert report.complete and report.events == 120
    assert sink_rows(spark, cfg.sink) == sent_rows(hub.sent)
    r = report.partitions["1"]
    assert (r.first_sequence_number, r.last_sequence_number, r.checkpoint_sequence_number) == (
        0,
        39,
        39,
    )
    assert r.bytes == sum(len(b) for b in hub.sent["1"])
    assert r.first_enqueued_time is not None and r.last_enqueued_time >= r.first_enqueued_time
    assert (r.lag_events, r.lag_seconds, r.read_by) == (0, 0.0, ["run-1"])
    cps = store_of(cfg).list_sdk_checkpoints()  # what an EventProcessorClient would resume from
    assert {p: c.sequence_number for p, c in cps.items()} == {"0": 39, "1": 39, "2": 39}
    assert all(c.offset for c in cps.values())


def test_sequential_runs_continue_where_the_previous_stopped(spark, hub: Hub, make_config) -> None:
    hub.send(25)
    cfg = make_config(max_events_per_partition=10, strategy="greedy")
    first = run_ingestion(cfg, spark, owner_id="cron-1")
    assert first.complete and first.events == 30
    assert first.partitions["0"].lag_events == 15 and first.partitions["0"].lag_seconds > 0
    second = run_ingestion(cfg, spark, owner_id="cron-2")
    assert [second.partitions[p].first_sequence_number for p in "012"] == [10, 10, 10]
    hub.send(5)
    for i in range(3, 6):
        run_ingestion(cfg, spark, owner_id=f"cron-{i}")
    assert sink_rows(spark, cfg.sink) == sent_rows(hub.sent)
    cps = store_of(cfg).list_checkpoints()
    assert {p: c.sequence_number for p, c in cps.items()} == {"0": 29, "1": 29, "2": 29}


def test_pending_intent_of_a_crashed_run_is_replayed_exactly(spark, hub: Hub, make_config) -> None:
    from dagster_eventhub_ingest.ops.run.ingestor import SparkIngestor

    hub.send(30)
    cfg = make_config()
    store = store_of(cfg)
    # A run claimed partition 1, recorded [0, 19], wrote it, and died before its checkpoint.
    own = store.claim("1", "crashed-run", None)
    assert own is not None
    store.record_intent(own, 0, 19)
    SparkIngestor(spark, cfg.eventhub, cfg.sink).ingest({"1": (0, 19)})
    report = run_ingestion(
        cfg, spark, owner_id="next-run", is_owner_dead=lambda owner: owner == "crashed-run"
    )
    assert report.complete
    r1 = report.partitions["1"]
    # The replay covers exactly the recorded range first, then the rest of the bound.
    assert r1.ranges_written[0] == (0, 19) and r1.checkpoint_sequence_number == 29
    assert sink_rows(spark, cfg.sink) == sent_rows(hub.sent)  # 0..19 once, not twice
    assert store.get_ownership("1").intent is None


def test_replay_rewrites_a_range_and_never_moves_the_checkpoint(
    spark, hub: Hub, make_config
) -> None:
    hub.send(20)
    cfg = make_config(max_events_per_partition=12)
    run_ingestion(cfg, spark, owner_id="live")
    before = store_of(cfg).list_checkpoints()
    report = run_ingestion(
        cfg, spark, owner_id="replay", replay=ReplaySettings(ranges={"2": (0, 11)})
    )
    assert report.replay and report.complete and report.partitions["2"].events == 12
    assert store_of(cfg).list_checkpoints() == before
    # Same range as the live run wrote: replaced, not duplicated.
    assert sink_rows(spark, cfg.sink) == sent_rows({p: b[:12] for p, b in hub.sent.items()})
    with pytest.raises(RangeError, match="after the last enqueued event 19"):
        run_ingestion(cfg, spark, owner_id="replay", replay=ReplaySettings(ranges={"0": (0, 50)}))


def expire_all(emulator, hub_name: str) -> None:
    """Let retention drop every event stored so far (the emulator's own pruning), then stop."""
    hub = emulator.server.namespace.get(hub_name)
    hub.retention_seconds = 0.001
    time.sleep(0.05)
    for partition in hub.partitions:
        partition.prune()
    hub.retention_seconds = None


def test_data_loss_fails_with_advice_or_skips_and_reports_the_gap(
    spark, eventhub_emulator, hub: Hub, make_config
) -> None:
    cfg = make_config(max_events_per_partition=5)
    hub.send(10, ["0"])
    assert run_ingestion(cfg, spark, owner_id="a", partition_ids=["0"]).complete  # 0..4
    expire_all(eventhub_emulator, hub.hub.name)  # 5..9 expire unread
    hub.send(3, ["0"])  # 10..12
    with pytest.raises(DataLossError) as err:
        run_ingestion(cfg, spark, owner_id="b", partition_ids=["0"])
    assert "events 5..9 expired" in str(err.value) and "on_data_loss: skip" in str(err.value)
    assert store_of(cfg).list_checkpoints()["0"].sequence_number == 4
    skip = make_config(max_events_per_partition=5, on_data_loss="skip")
    report = run_ingestion(skip, spark, owner_id="c", partition_ids=["0"])
    r = report.partitions["0"]
    assert report.complete and r.skipped_ranges == [(5, 9)]
    assert (r.first_sequence_number, r.checkpoint_sequence_number, r.events) == (10, 12, 3)
    assert [row[1] for row in sink_rows(spark, cfg.sink)] == [0, 1, 2, 3, 4, 10, 11, 12]


def test_unknown_partition_is_a_clear_error(spark, hub: Hub, make_config) -> None:
    with pytest.raises(
        RangeError, match=r"partition\(s\) 9 do not exist.*valid partition ids: 0, 1, 2"
    ):
        run_ingestion(make_config(), spark, owner_id="x", partition_ids=["1", "9"])


def test_unwritable_sink_fails_and_nothing_is_checkpointed(
    spark, hub: Hub, make_config, tmp_path: Path
) -> None:
    hub.send(5, ["0"])
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cfg = make_config(sink=SinkSettings(path=str(blocker / "out")))
    # Found when the run records its source in the sink, before anything is claimed.
    with pytest.raises(SinkError, match="cannot read or record the source") as err:
        run_ingestion(cfg, spark, owner_id="x", partition_ids=["0"])
    assert "Not a directory" in str(err.value) and not err.value.retryable
    store = store_of(cfg)
    assert store.list_checkpoints() == {} and store.get_ownership("0") is None


def test_unreachable_hub_fails_fast_with_a_clear_error(
    blob_store_settings: StoreSettings, tmp_path: Path
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    conn = f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=k;SharedAccessKey=hunter2;UseDevelopmentEmulator=true"
    cfg = IngestSettings(
        eventhub=EventHubSettings(eventhub_name="nohub", connection_string=conn),
        store=blob_store_settings,
        sink=SinkSettings(path=str(tmp_path / "out")),
    )
    started = time.monotonic()
    with pytest.raises(EventHubUnavailableError) as err:
        run_ingestion(cfg, None, owner_id="x")
    assert time.monotonic() - started < 15
    msg = str(err.value)
    assert f"127.0.0.1:{port}/nohub" in msg and "reachable" in msg and "hunter2" not in msg


def test_the_readers_statistics_are_what_the_sink_holds(
    spark, hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    """A classic session's readers tell the driver what they read (an accumulator): the write
    then observes nothing and verifies by a row count, and the statistics equal those read
    back from the sink, over several readers of one partition whose events differ in size."""
    import logging

    from pyspark.sql import DataFrame

    import dagster_eventhub_ingest.ops.sinks.verify
    from dagster_eventhub_ingest.ops.sinks.write import write_batch
    from dagster_eventhub_ingest.resources.eventhubs_source import (
        PartitionRange,
        ReadOptions,
        ReadPlan,
        read_eventhubs,
    )
    from dagster_eventhub_ingest.resources.eventhubs_source.stats import read_stats_accumulator

    for n in (3, 7):
        hub.send(n, partitions=["0"])
    hub.send(12, partitions=["1"])
    ranges = {"0": (2, 9), "1": (0, 11)}
    with read_stats_accumulator(spark) as acc:
        assert acc is not None
        options = ReadOptions(
            settings=hub.hub.settings(),
            ranges=tuple(PartitionRange(p, s, e) for p, (s, e) in ranges.items()),
            max_readers_per_partition=3,
            min_events_per_reader=3,
            read_stats=acc.aid,
        )
        observed: list[object] = []
        real_observe = DataFrame.observe
        monkeypatch.setattr(
            DataFrame, "observe", lambda self, *a: observed.append(a) or real_observe(self, *a)
        )
        read_back: list[object] = []
        real_read_back = dagster_eventhub_ingest.ops.sinks.verify.read_back_stats
        monkeypatch.setattr(
            dagster_eventhub_ingest.ops.sinks.verify,
            "read_back_stats",
            lambda *a, **k: read_back.append(a) or real_read_back(*a, **k),
        )
        sink = SinkSettings(format="parquet", path=str(tmp_path / "reader"))
        result = write_batch(
            read_eventhubs(spark, options), sink, ranges, read_stats=lambda: acc.value
        )
        subs = sorted(acc.value)
    planned = ReadPlan(options=options, ranges=options.ranges or ()).input_partitions()
    assert subs == sorted((p.range.partition_id, p.range.start, p.range.end) for p in planned)
    assert len(subs) == 5  # several readers per partition (2 and 3)
    assert observed == [] and read_back == []  # nothing observed, nothing aggregated back
    plain = dataclasses.replace(options, read_stats=None)
    truth = write_batch(
        read_eventhubs(spark, plain),
        SinkSettings(format="parquet", path=str(tmp_path / "readback")),
        ranges,
        stats_method="readback",
    )
    assert result.partitions == truth.partitions
    r0 = result.partitions["0"]
    assert (r0.events, r0.first_sequence_number, r0.last_sequence_number) == (8, 2, 9)
    assert r0.bytes == sum(len(b) for b in hub.sent["0"][2:10])
    assert r0.last_offset and r0.first_enqueued_time <= r0.last_enqueued_time
    assert sink_rows(spark, sink) == [
        row for row in sent_rows(hub.sent) if row[1] >= ranges[row[0]][0] and row[0] in ranges
    ]
    # Readers whose updates did not arrive: the statistics come from the sink, the same.
    with caplog.at_level(logging.WARNING, logger="dagster_eventhub_ingest.ops.sinks"):
        again = write_batch(read_eventhubs(spark, plain), sink, ranges, read_stats=lambda: {})
    assert again.partitions == truth.partitions
    assert "do not cover the batch" in caplog.text
    assert sink_rows(spark, sink) == sink_rows(
        spark, SinkSettings(format="parquet", path=str(tmp_path / "readback"))
    )
