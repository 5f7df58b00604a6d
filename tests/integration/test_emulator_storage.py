"""Retention, persistence across restarts, and concurrent producers and consumers (real SDK)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from azure.eventhub import EventData

from dagster_eventhub_ingest.emulator.testing import EmulatedHub, running_emulator

pytestmark = pytest.mark.integration

MakeHub = Callable[..., EmulatedHub]


def _props(hub: EmulatedHub, pid: str = "0") -> dict[str, Any]:
    with hub.producer() as producer:
        return dict(producer.get_partition_properties(pid))


def _stored(props: dict[str, Any]) -> int:
    """Events a partition holds, by its properties (a hub that never expired any): what a
    receive waits for, however slowly the SDK's client starts on a busy machine (it then
    waits ``settle`` longer for any extras)."""
    return 0 if props["is_empty"] else int(props["last_enqueued_sequence_number"]) + 1


def test_retention_hides_old_events_and_moves_begin(make_eventhub: MakeHub) -> None:
    retention = 8.0  # wide enough for the SDK's ~1.5 s per client start on a busy machine
    hub = make_eventhub(partitions=1, retention_seconds=retention)
    hub.send("0", [b"old-0", b"old-1", b"old-2"])
    old_offset = _props(hub)["last_enqueued_offset"]
    time.sleep(retention + 0.2)
    hub.send("0", [b"new-3", b"new-4"])
    props = _props(hub)
    assert props["beginning_sequence_number"] == 3
    assert props["last_enqueued_sequence_number"] == 4
    assert props["is_empty"] is False
    for position in ("-1", 0, old_offset):
        # A checkpoint older than retention resumes at the oldest readable event.
        events = hub.receive("0", position, expected=2, inclusive=True)
        assert [(e.sequence_number, e.body_as_str()) for e in events] == [
            (3, "new-3"),
            (4, "new-4"),
        ]


def test_retention_can_empty_a_partition(make_eventhub: MakeHub) -> None:
    hub = make_eventhub(partitions=1, retention_seconds=1.0)
    hub.send("0", [b"gone"])
    time.sleep(1.2)
    props = _props(hub)
    assert props["beginning_sequence_number"] == 1
    assert props["last_enqueued_sequence_number"] == 0
    assert props["is_empty"] is True
    assert hub.receive("0", "-1", expected=0) == []


def _view(events: list[Any]) -> list[tuple[Any, ...]]:
    return [
        (
            e.sequence_number,
            e.offset,
            e.enqueued_time,
            e.partition_key,
            e.body_as_str(),
            e.properties,
        )
        for e in events
    ]


def test_persistence_across_restart(tmp_path: Path) -> None:
    data = tmp_path / "eventhubs"
    with running_emulator(hubs={"orders": 2}, consumer_groups=["spark"], data_dir=data) as emu:
        hub = emu.hub("orders")
        hub.send("0", [b"a", b"b"], properties={"n": 1})
        hub.send(None, [b"keyed"], partition_key="customer-7")
        props_before = {pid: _props(hub, pid) for pid in "01"}
        stored = {pid: _stored(props) for pid, props in props_before.items()}
        before = {pid: _view(hub.receive(pid, "-1", expected=stored[pid])) for pid in "01"}
    assert sum(stored.values()) == 3
    assert {pid: len(events) for pid, events in before.items()} == stored

    # A later emulator process on the same data dir (and another port) serves the same hub.
    with running_emulator(data_dir=data) as emu:
        hub = emu.hub("orders")
        assert hub.partition_ids == ("0", "1")
        assert "spark" in hub.consumer_groups
        after = {pid: _view(hub.receive(pid, "-1", expected=stored[pid])) for pid in "01"}
        assert after == before
        assert {pid: _props(hub, pid) for pid in "01"} == props_before
        hub.send("0", [b"c"])
        n = len(before["0"])
        events = hub.receive("0", "-1", expected=n + 1, consumer_group="spark")
        assert [e.sequence_number for e in events] == list(range(n + 1))
        assert events[-1].body_as_str() == "c"
        assert int(events[-1].offset) > int(events[-2].offset)


def test_concurrent_producers_and_consumers(make_eventhub: MakeHub) -> None:
    hub = make_eventhub(partitions=4)
    producers, per_producer = 3, 150
    received: dict[str, list[Any]] = {pid: [] for pid in hub.partition_ids}
    lock = threading.Lock()
    clients = []
    threads = []
    for pid in hub.partition_ids:
        client = hub.consumer()
        clients.append(client)

        def on_event(ctx: Any, event: Any, pid: str = pid) -> None:
            if event is not None:
                with lock:
                    received[pid].append(event)

        t = threading.Thread(
            target=client.receive,
            kwargs={"on_event": on_event, "partition_id": pid, "starting_position": "-1"},
            daemon=True,
        )
        t.start()
        threads.append(t)

    def produce(n: int) -> None:
        with hub.producer() as producer:
            for start in range(0, per_producer, 10):
                key = f"producer-{n}-key-{start % 3}"
                batch = producer.create_batch(partition_key=key)
                for i in range(start, start + 10):
                    batch.add(EventData(f"{n}:{i}"))
                producer.send_batch(batch)

    senders = [threading.Thread(target=produce, args=(n,)) for n in range(producers)]
    for s in senders:
        s.start()
    for s in senders:
        s.join(60)
    deadline = time.monotonic() + 30
    while sum(len(v) for v in received.values()) < producers * per_producer:
        assert time.monotonic() < deadline, "not every event arrived"
        time.sleep(0.1)
    time.sleep(0.5)
    for client in clients:
        client.close()
    for t in threads:
        t.join(10)

    bodies = [e.body_as_str() for events in received.values() for e in events]
    assert len(bodies) == len(set(bodies)) == producers * per_producer
    for pid, events in received.items():
        assert [e.sequence_number for e in events] == list(range(len(events))), pid
        per_key: dict[str, list[int]] = {}
        for e in events:
            _, i = e.body_as_str().split(":")
            per_key.setdefault(e.partition_key.decode(), []).append(int(i))
        for key, order in per_key.items():
            assert order == sorted(order), key  # one producer's key keeps its order
