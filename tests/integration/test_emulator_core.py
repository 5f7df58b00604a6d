"""The emulator's core with the real azure-eventhub SDK: properties, send, receive positions."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import Any

import pytest
from azure.eventhub import EventData

from dagster_eventhub_ingest.emulator.partition_key import partition_for_key
from dagster_eventhub_ingest.emulator.testing import EmulatedHub, EmulatorHandle

pytestmark = pytest.mark.integration

UTC = dt.timezone.utc
MakeHub = Callable[..., EmulatedHub]


def test_hub_properties(make_eventhub: MakeHub) -> None:
    hub = make_eventhub(partitions=3)
    with hub.producer() as producer:
        props = producer.get_eventhub_properties()
    assert props["eventhub_name"] == hub.name
    assert props["partition_ids"] == ["0", "1", "2"]
    assert abs((dt.datetime.now(UTC) - props["created_at"]).total_seconds()) < 60


def test_empty_and_non_empty_partition_properties(make_eventhub: MakeHub) -> None:
    hub = make_eventhub(partitions=2)
    with hub.producer() as producer:
        empty = producer.get_partition_properties("1")
        before = dt.datetime.now(UTC)
        hub.send("1", [b"a", b"bb", b"ccc"])
        full = producer.get_partition_properties("1")
        other = producer.get_partition_properties("0")
    assert empty["is_empty"] is True
    assert empty["last_enqueued_sequence_number"] == -1
    assert empty["last_enqueued_offset"] == "-1"
    assert empty["beginning_sequence_number"] == 0
    # the service's "never" (0001-01-01), which the SDK maps to datetime.min
    assert empty["last_enqueued_time_utc"] == dt.datetime.min.replace(tzinfo=UTC)
    assert full["is_empty"] is False
    assert full["id"] == "1" and full["eventhub_name"] == hub.name
    assert full["beginning_sequence_number"] == 0
    assert full["last_enqueued_sequence_number"] == 2
    assert int(full["last_enqueued_offset"]) > 0
    assert before - dt.timedelta(seconds=1) <= full["last_enqueued_time_utc"]
    assert full["last_enqueued_time_utc"] <= dt.datetime.now(UTC) + dt.timedelta(seconds=1)
    assert other["is_empty"] is True


def test_send_batch_and_receive_from_start(make_eventhub: MakeHub) -> None:
    hub = make_eventhub(partitions=2)
    bodies = [f"event-{i}".encode() for i in range(10)]
    hub.send("0", bodies, properties=[{"i": i, "kind": "test"} for i in range(10)])
    events = hub.receive("0", "-1", expected=10)
    assert [e.body_as_str() for e in events] == [b.decode() for b in bodies]
    assert [e.sequence_number for e in events] == list(range(10))
    assert [e.properties[b"i"] for e in events] == list(range(10))
    assert all(e.properties[b"kind"] == b"test" for e in events)
    offsets = [int(e.offset) for e in events]
    assert offsets == sorted(offsets) and len(set(offsets)) == 10
    assert all(e.partition_key is None for e in events)
    times = [e.enqueued_time for e in events]
    assert times == sorted(times)
    assert hub.receive("1", "-1", expected=0) == []


def _sent_events(hub: EmulatedHub) -> list[tuple[str | None, bytes, dict[str, Any]]]:
    """Send 9 events to a 1-partition hub in 3 sends with distinct enqueued times."""
    plan: list[tuple[str | None, bytes, dict[str, Any]]] = []
    for group in range(3):
        key = None if group == 1 else f"key-{group}"
        bodies = [f"g{group}-e{i}".encode() for i in range(3)]
        props = [{"group": group, "i": i, "label": f"g{group}"} for i in range(3)]
        hub.send(None, bodies, properties=props, partition_key=key)
        plan += [(key, b, p) for b, p in zip(bodies, props, strict=True)]
        time.sleep(0.02)  # distinct enqueued times per send
    return plan


def _view(events: list[Any]) -> list[tuple[Any, ...]]:
    return [
        (
            e.sequence_number,
            e.offset,
            e.enqueued_time,
            e.partition_key.decode() if isinstance(e.partition_key, bytes) else e.partition_key,
            e.body_as_str().encode(),
            {
                k.decode(): (v.decode() if isinstance(v, bytes) else v)
                for k, v in e.properties.items()
            },
        )
        for e in events
    ]


@pytest.fixture(scope="module")
def positioned(eventhub_emulator: EmulatorHandle) -> tuple[EmulatedHub, list[tuple[Any, ...]]]:
    """A 1-partition hub holding 9 known events, and their full view read from the start."""
    hub = eventhub_emulator.create_hub(partitions=1)
    sent = _sent_events(hub)
    reference = _view(hub.receive("0", "-1", expected=9))
    # Independent checks of the reference against what was sent.
    assert [r[0] for r in reference] == list(range(9))
    assert [(r[3], r[4], r[5]) for r in reference] == [
        (key, body, props) for key, body, props in sent
    ]
    offsets = [int(r[1]) for r in reference]
    assert offsets[0] == 0 and offsets == sorted(offsets) and len(set(offsets)) == 9
    times = [r[2] for r in reference]
    assert times[0] == times[2] < times[3] == times[5] < times[6] == times[8]
    return hub, reference


@pytest.mark.parametrize("inclusive", [False, True])
@pytest.mark.parametrize("form", ["sequence_number", "offset", "enqueued_time"])
@pytest.mark.parametrize("index", [0, 4, 8])
def test_starting_positions(
    positioned: tuple[EmulatedHub, list[tuple[Any, ...]]], form: str, index: int, inclusive: bool
) -> None:
    hub, reference = positioned
    seq, offset, enqueued, *_ = reference[index]
    position: Any
    if form == "sequence_number":
        position = seq
        expected = [r for r in reference if (r[0] >= seq if inclusive else r[0] > seq)]
    elif form == "offset":
        position = offset
        expected = [
            r
            for r in reference
            if (int(r[1]) >= int(offset) if inclusive else int(r[1]) > int(offset))
        ]
    else:
        position = enqueued
        expected = [r for r in reference if (r[2] >= enqueued if inclusive else r[2] > enqueued)]
    got = _view(hub.receive("0", position, expected=len(expected), inclusive=inclusive))
    assert got == expected


def test_start_and_latest(positioned: tuple[EmulatedHub, list[tuple[Any, ...]]]) -> None:
    hub, reference = positioned
    assert _view(hub.receive("0", "-1", expected=9)) == reference
    assert hub.receive("0", "@latest", expected=0) == []


def test_latest_sees_only_new_events(
    make_eventhub: MakeHub, eventhub_emulator: EmulatorHandle
) -> None:
    import threading

    hub = make_eventhub(partitions=1)
    hub.send("0", [b"old-1", b"old-2"])
    result: list[Any] = []
    reader = threading.Thread(
        target=lambda: result.extend(hub.receive("0", "@latest", expected=2, timeout=20))
    )
    reader.start()
    eventhub_emulator.wait_for_readers(hub.name, "0", 1)
    hub.send("0", [b"new-1", b"new-2"])
    reader.join(30)
    assert [e.body_as_str() for e in result] == ["new-1", "new-2"]
    assert [e.sequence_number for e in result] == [2, 3]


def test_send_event_single_and_to_hub_round_robin(make_eventhub: MakeHub) -> None:
    hub = make_eventhub(partitions=4)
    with hub.producer() as producer:
        for i in range(8):
            producer.send_event(EventData(f"rr-{i}"))
        producer.send_event(EventData("direct"), partition_id="2")
        counts = {
            pid: producer.get_partition_properties(pid)["last_enqueued_sequence_number"] + 1
            for pid in hub.partition_ids
        }
    assert counts == {"0": 2, "1": 2, "2": 3, "3": 2}
    events = hub.receive("2", "-1", expected=3)
    assert events[-1].body_as_str() == "direct"


def test_partition_key_routing_is_stable(make_eventhub: MakeHub) -> None:
    hub = make_eventhub(partitions=4)
    keys = [f"device-{i}" for i in range(12)]
    with hub.producer() as producer:
        for key in keys:
            for suffix in "ab":  # two separate sends per key: both must land together
                batch = producer.create_batch(partition_key=key)
                batch.add(EventData(f"{key}-{suffix}"))
                producer.send_batch(batch)
        # What each partition holds, by the hub's own count: the receive below waits for exactly
        # that many (then settles, so extras would show), instead of guessing from a quiet
        # spell, which a loaded machine's slow first receive outlasted.
        held = {
            pid: producer.get_partition_properties(pid)["last_enqueued_sequence_number"] + 1
            for pid in hub.partition_ids
        }
    assert sum(held.values()) == 2 * len(keys)
    seen: dict[str, set[str]] = {}
    for pid in hub.partition_ids:
        events = hub.receive(pid, "-1", expected=held[pid]) if held[pid] else []
        assert len(events) == held[pid]
        for event in events:
            key = event.partition_key.decode()
            seen.setdefault(key, set()).add(pid)
            assert event.body_as_str().startswith(key)
    assert set(seen) == set(keys)
    for key in keys:
        assert seen[key] == {str(partition_for_key(key, 4))}
    assert len({pid for pids in seen.values() for pid in pids}) > 1  # keys spread out


def test_several_hubs_are_isolated(make_eventhub: MakeHub) -> None:
    first, second = make_eventhub(partitions=1), make_eventhub(partitions=3)
    first.send("0", [b"only-in-first"])
    second.send("2", [b"only-in-second"])
    assert [e.body_as_str() for e in first.receive("0", "-1", expected=1)] == ["only-in-first"]
    assert second.receive("0", "-1", expected=0) == []
    assert [e.body_as_str() for e in second.receive("2", "-1", expected=1)] == ["only-in-second"]
    with second.producer() as producer:
        assert producer.get_partition_ids() == ["0", "1", "2"]


def test_large_event_spans_frames_and_size_limit(make_eventhub: MakeHub) -> None:
    hub = make_eventhub(partitions=1)
    big = bytes(range(256)) * 3900  # ~1 MB: more than one frame in each direction
    with hub.producer() as producer:
        batch = producer.create_batch()
        assert batch.max_size_in_bytes == 1024 * 1024  # the emulator's advertised limit
        producer.send_event(EventData(big), partition_id="0")
        with pytest.raises(ValueError, match="size"):
            too_big = producer.create_batch(partition_id="0")
            too_big.add(EventData(b"x" * (1024 * 1024 + 1)))
    events = hub.receive("0", "-1", expected=1)
    assert len(events) == 1 and b"".join(events[0].body) == big


def test_async_sdk_send_and_receive(make_eventhub: MakeHub) -> None:
    import asyncio

    from azure.eventhub.aio import EventHubConsumerClient, EventHubProducerClient

    hub = make_eventhub(partitions=2)

    async def run() -> list[Any]:
        producer = EventHubProducerClient.from_connection_string(
            hub.connection_string, eventhub_name=hub.name
        )
        async with producer:
            batch = await producer.create_batch(partition_id="1")
            for i in range(5):
                batch.add(EventData(f"async-{i}"))
            await producer.send_batch(batch)
            assert (await producer.get_partition_properties("1"))[
                "last_enqueued_sequence_number"
            ] == 4
        got: list[Any] = []
        # The aio client's close waits out the load-balancing sleep (30 s by default).
        consumer = EventHubConsumerClient.from_connection_string(
            hub.connection_string,
            consumer_group="$Default",
            eventhub_name=hub.name,
            load_balancing_interval=1,
        )

        async def on_event(_ctx: Any, event: Any) -> None:
            got.append(event)

        async with consumer:
            task = asyncio.create_task(
                consumer.receive(on_event, partition_id="1", starting_position="-1")
            )
            for _ in range(150):
                if len(got) >= 5:
                    break
                await asyncio.sleep(0.1)
            await consumer.close()
            await task
        return got

    events = asyncio.run(run())
    assert [e.body_as_str() for e in events] == [f"async-{i}" for i in range(5)]
    assert [e.sequence_number for e in events] == list(range(5))
