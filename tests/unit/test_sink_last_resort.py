"""The sink as the checkpoint of last resort (pure logic).

In-memory store (Blob CAS semantics), fake hub and a fake sink keyed like ``eh_batch``: what a
run does when the store lost its checkpoint or holds an older one than the sink. The same
stories against Azurite, the emulator and Spark are in
tests/integration/test_sink_last_resort_integration.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from dagster_eventhub_ingest.ops.run.plan import sink_coverage
from dagster_eventhub_ingest.ops.sinks.batch import BatchKey, batch_key, parse_batch_key
from dagster_eventhub_ingest.resources.errors import CheckpointAheadError
from dagster_eventhub_ingest.resources.ranges import SeqRange
from dagster_eventhub_ingest.resources.store.memory import InMemoryBackend
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from tests.support.run_fakes import FakeHub, make


def _forget_checkpoints(backend: InMemoryBackend, store: PartitionStore) -> None:
    """What the corrupt-state message suggests: delete the SDK checkpoint blob and drop the
    fenced copy from the ownership blob."""
    for record in backend.list(store.hub.prefix("checkpoint")):
        backend.delete(record.name)
    for record in backend.list(store.hub.prefix("ownership")):
        kept = {
            k: v for k, v in record.metadata.items() if k not in ("ehisequencenumber", "ehioffset")
        }
        backend.put(record.name, kept, etag=record.etag)


def test_batch_keys_round_trip_with_generation_and_source() -> None:
    for parts in [
        ("0", 0, 9, None, None),
        ("3", 1000, 1999, 1_700_000_000_000, None),
        ("a-1", 5, 5, None, "0123456789ab"),
        ("12", 7, 70, 42, "abcdef012345"),
    ]:
        key = batch_key(*parts)
        assert parse_batch_key(key) == BatchKey(*parts), key
    for foreign in ["x", "0-9-0", "0-01-9", "0-0-9-gx", "0-0-9-s"]:
        assert parse_batch_key(foreign) is None, foreign


def test_sink_coverage_passes_over_held_batches_and_stops_before_later_ones() -> None:
    held = [SeqRange(0, 9), SeqRange(10, 54)]
    assert sink_coverage(0, 99, held) == (54, 99)
    assert sink_coverage(5, 99, held) == (54, 99)  # a checkpoint inside a batch
    assert sink_coverage(55, 99, held) == (None, 99)  # nothing held from 55 on
    # A batch further on (a replay ahead of the checkpoint): read up to it, never into it.
    assert sink_coverage(21, 99, [SeqRange(50, 60)]) == (None, 49)
    assert sink_coverage(50, 99, [SeqRange(50, 60), SeqRange(61, 70)]) == (70, 99)
    assert sink_coverage(0, 9, [SeqRange(20, 30)]) == (None, 9)


def test_a_lost_checkpoint_continues_after_what_the_sink_holds() -> None:
    hub = FakeHub(1)
    hub.send_all(55)
    backend = InMemoryBackend()
    proc, store, sink = make(hub, backend, owner="first")
    assert proc.run().complete
    _forget_checkpoints(backend, store)
    assert store.list_checkpoints() == {}
    hub.send_all(20)
    proc2, _, _ = make(hub, backend, owner="second", ingestor=sink)
    report = proc2.run()
    assert report.complete and sink.calls[-1] == {"0": (55, 74)}
    assert sink.rows() == sink.expected()  # 0..54 once: nothing landed twice
    note = report.partitions["0"].checkpoint_reset
    assert note is not None and "moved from None to 54" in note and "already holds [0, 54]" in note
    assert store.list_checkpoints()["0"].sequence_number == 74
    assert "already holds [0, 54]" in (store.list_sdk_checkpoints()["0"].reset or "")


def test_a_checkpoint_older_than_the_sink_continues_after_it() -> None:
    hub = FakeHub(2)
    hub.send_all(30)
    backend = InMemoryBackend()
    proc, store, sink = make(hub, backend, owner="a", max_events_per_partition=10)
    for _ in range(3):
        assert proc.run().complete
        proc, _, _ = make(hub, backend, owner="a", max_events_per_partition=10, ingestor=sink)
    # The store restored from a copy taken after the first run: checkpoints at 9, sink at 29.
    for pid in ("0", "1"):
        own = store.get_ownership(pid)
        assert own is not None
        backend.put(
            store.hub.prefix("ownership") + pid,
            {**dict(own.metadata or {}), "ehisequencenumber": "9"},
            etag=own.etag,
        )
        cp = backend.get(store.hub.prefix("checkpoint") + pid)
        assert cp is not None
        backend.put(cp.name, {**cp.metadata, "sequencenumber": "9"}, etag=cp.etag)
    hub.send_all(5)
    proc, _, _ = make(hub, backend, owner="b", max_events_per_partition=100, ingestor=sink)
    report = proc.run()
    assert report.complete
    assert sink.calls[-1] == {"0": (30, 34), "1": (30, 34)}
    assert sink.rows() == sink.expected()


def test_a_batch_replayed_ahead_of_the_checkpoint_is_read_around_never_twice() -> None:
    hub = FakeHub(1)
    hub.send_all(100)
    backend = InMemoryBackend()
    proc, store, sink = make(hub, backend, owner="a", max_events_per_partition=21)
    assert proc.run().complete  # 0..20
    sink.ingest({"0": (50, 60)})  # a replay run wrote [50, 60] into the live sink
    proc, _, _ = make(hub, backend, owner="b", ingestor=sink)
    report = proc.run()
    assert report.complete
    assert sink.calls[-2:] == [{"0": (21, 49)}, {"0": (61, 99)}]
    assert sink.rows() == sink.expected()
    assert store.list_checkpoints()["0"].sequence_number == 99


def test_an_ownership_blob_lost_after_a_write_is_not_replayed_into_a_second_batch() -> None:
    hub = FakeHub(1)
    hub.send_all(40)
    backend = InMemoryBackend()
    proc, store, sink = make(hub, backend, owner="a", max_events_per_partition=20)
    assert proc.run().complete  # batch 0-0-19, checkpoint 19

    def crash(_ranges):
        raise KeyboardInterrupt  # dies after writing 0-20-39, before its checkpoint

    proc, _, _ = make(hub, backend, owner="a", max_events_per_partition=20, ingestor=sink)
    sink.after_write = crash
    with pytest.raises(KeyboardInterrupt):
        proc.run()
    sink.after_write = None
    # Intent and fenced copy gone with the ownership blob; the SDK blob says 19.
    for record in backend.list(store.hub.prefix("ownership")):
        backend.delete(record.name)
    proc, _, _ = make(hub, backend, owner="b", ingestor=sink)
    report = proc.run()
    assert report.complete and sink.rows() == sink.expected()
    assert store.list_checkpoints()["0"].sequence_number == 39


def test_a_recreated_hub_whose_store_was_lost_is_refused_then_reset_on_request() -> None:
    hub = FakeHub(1)
    hub.send_all(30)
    backend = InMemoryBackend()
    proc, store, sink = make(hub, backend, owner="a")
    assert proc.run().complete  # the old hub's batch 0-0-29, plain key
    hub.recreate()
    # The new hub was created after every old event was enqueued (service clock).
    hub.created_ms = int((datetime(2024, 1, 2, tzinfo=timezone.utc)).timestamp() * 1000)
    hub.send_all(40)
    day3 = datetime(2024, 1, 3, tzinfo=timezone.utc)
    hub.events = {
        p: [(s, b, day3 + timedelta(seconds=s)) for s, b, _ in evs] for p, evs in hub.events.items()
    }
    _forget_checkpoints(backend, store)
    proc, _, _ = make(hub, backend, owner="b", ingestor=sink)
    with pytest.raises(CheckpointAheadError) as refused:
        proc.run()
    assert "earlier hub" in str(refused.value) and "--on-checkpoint-ahead" in str(refused.value)
    assert len(sink.calls) == 1  # nothing read
    proc, _, _ = make(
        hub, backend, owner="c", on_checkpoint_ahead="reset_to_earliest", ingestor=sink
    )
    report = proc.run()
    assert report.complete and "earlier hub" in (report.partitions["0"].checkpoint_reset or "")
    keys = sorted(sink.sink)
    assert keys == [("0", 0, 29), ("0", 0, 39, hub.created_ms)]  # both hubs' events kept
    # The generation is kept: the next run continues under the new hub's keys.
    hub.send_all(5)
    proc, _, _ = make(hub, backend, owner="d", ingestor=sink)
    assert proc.run().complete
    assert ("0", 40, 44, hub.created_ms) in sink.sink


def test_a_generation_the_store_lost_is_taken_from_the_sinks_batches() -> None:
    hub = FakeHub(1)
    hub.send_all(10)
    backend = InMemoryBackend()
    proc, store, sink = make(hub, backend, owner="a")
    assert proc.run().complete
    hub.recreate()
    hub.send_all(20)
    proc, _, _ = make(
        hub, backend, owner="b", on_checkpoint_ahead="reset_to_earliest", ingestor=sink
    )
    assert proc.run().complete  # 0-0-19-g<created>
    _forget_checkpoints(backend, store)
    hub.send_all(5)
    proc, _, _ = make(hub, backend, owner="c", ingestor=sink)
    report = proc.run()
    assert report.complete
    assert sink.calls[-1] == {"0": (20, 24)}
    assert ("0", 20, 24, hub.created_ms) in sink.sink  # under the generation it had
    assert store.list_checkpoints()["0"].generation == hub.created_ms
