"""The emulator's core with the real azure-eventhub SDK: properties, send, receive positions."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from azure.eventhub import EventHubConsumerClient

from emulator.testing import EmulatedHub

pytestmark = pytest.mark.integration


def receive(
    hub: EmulatedHub,
    partition_id: str,
    starting_position: Any,
    expected: int,
    inclusive: bool = False,
    timeout: float = 15.0,
    settle: float = 0.3,
    **kwargs: Any,
) -> list[Any]:
    """Receive from one partition until ``expected`` events came, then ``settle`` s for extras."""
    got: list[Any] = []
    done = threading.Event()
    consumer: EventHubConsumerClient = hub.consumer(**kwargs.pop("client_kwargs", {}))

    def on_event(_ctx: Any, event: Any) -> None:
        if event is not None:
            got.append(event)
            if len(got) >= expected:
                done.set()

    thread = threading.Thread(
        target=consumer.receive,
        kwargs={
            "on_event": on_event,
            "partition_id": partition_id,
            "starting_position": starting_position,
            "starting_position_inclusive": inclusive,
            "max_wait_time": 0.2,
            **kwargs,
        },
        daemon=True,
    )
    thread.start()
    try:
        if expected:
            done.wait(timeout)
        time.sleep(settle)
    finally:
        consumer.close()
        thread.join(10)
    return got


def test_hub_properties(make_eventhub: Callable[..., EmulatedHub]) -> None:
    hub = make_eventhub(partitions=3)
    with hub.producer() as producer:
        props = producer.get_eventhub_properties()
    assert props["eventhub_name"] == hub.name
    assert props["partition_ids"] == ["0", "1", "2"]
    assert abs((dt.datetime.now(dt.UTC) - props["created_at"]).total_seconds()) < 60


def test_empty_and_non_empty_partition_properties(
    make_eventhub: Callable[..., EmulatedHub],
) -> None:
    hub = make_eventhub(partitions=2)
    with hub.producer() as producer:
        empty = producer.get_partition_properties("1")
        before = dt.datetime.now(dt.UTC)
        hub.send("1", [b"a", b"bb", b"ccc"])
        full = producer.get_partition_properties("1")
    assert empty["is_empty"] is True
    assert empty["last_enqueued_sequence_number"] == -1
    assert empty["last_enqueued_offset"] == "-1"
    assert empty["beginning_sequence_number"] == 0
    assert empty["last_enqueued_time_utc"] == dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    assert full["is_empty"] is False
    assert full["id"] == "1" and full["eventhub_name"] == hub.name
    assert full["beginning_sequence_number"] == 0
    assert full["last_enqueued_sequence_number"] == 2
    assert int(full["last_enqueued_offset"]) > 0
    assert full["last_enqueued_time_utc"] >= before - dt.timedelta(seconds=1)


def test_send_batch_and_receive_from_start(make_eventhub: Callable[..., EmulatedHub]) -> None:
    hub = make_eventhub(partitions=2)
    bodies = [f"event-{i}".encode() for i in range(10)]
    hub.send("0", bodies, properties=[{"i": i, "kind": "test"} for i in range(10)])
    events = receive(hub, "0", "-1", expected=10)
    assert [e.body_as_str() for e in events] == [b.decode() for b in bodies]
    assert [e.sequence_number for e in events] == list(range(10))
    assert [e.properties[b"i"] for e in events] == list(range(10))
    assert all(e.properties[b"kind"] == b"test" for e in events)
    offsets = [int(e.offset) for e in events]
    assert offsets == sorted(offsets) and len(set(offsets)) == 10
    assert all(e.partition_key is None for e in events)
    times = [e.enqueued_time for e in events]
    assert times == sorted(times)
