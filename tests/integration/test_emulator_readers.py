"""Readers: owner level (epoch) stealing, the 5-reader quota, runtime metrics (real SDK)."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dagster_eventhub_ingest.emulator.testing import EmulatedHub, EmulatorHandle
from dagster_eventhub_ingest.emulator.wire import MAX_CONCURRENT_READERS

pytestmark = pytest.mark.integration

MakeHub = Callable[..., EmulatedHub]


class Reader:
    """A real SDK consumer reading one partition on a background thread until closed."""

    def __init__(
        self, hub: EmulatedHub, partition_id: str = "0", consumer_group: str = "$Default", **kw: Any
    ) -> None:
        self.events: list[Any] = []
        self.errors: list[BaseException] = []
        self.contexts: list[Any] = []
        self.client = hub.consumer(consumer_group, **kw.pop("client_kwargs", {}))
        self.thread = threading.Thread(
            target=self.client.receive,
            kwargs={
                "on_event": self._on_event,
                "on_error": lambda _ctx, err: self.errors.append(err),
                "partition_id": partition_id,
                "starting_position": "-1",
                "max_wait_time": 0.2,
                **kw,
            },
            daemon=True,
        )
        self.thread.start()

    def _on_event(self, ctx: Any, event: Any) -> None:
        if event is not None:
            self.events.append(event)
            self.contexts.append(ctx.last_enqueued_event_properties)

    def wait(self, predicate: Callable[[], bool], timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met; errors so far: {self.errors!r}")
            time.sleep(0.05)

    def close(self) -> None:
        self.client.close()
        self.thread.join(10)


@pytest.fixture
def readers() -> Iterator[list[Reader]]:
    started: list[Reader] = []
    yield started
    for reader in started:
        reader.close()


def test_higher_owner_level_steals_and_lower_is_refused(
    make_eventhub: MakeHub, eventhub_emulator: EmulatorHandle, readers: list[Reader]
) -> None:
    hub = make_eventhub(partitions=1)
    hub.send("0", [b"a", b"b"])
    plain = Reader(hub, client_kwargs={"retry_total": 0})
    readers.append(plain)
    first = Reader(hub, owner_level=1)
    readers.append(first)
    # An epoch reader takes over from the non-epoch one...
    plain.wait(lambda: bool(plain.errors))
    assert "amqp:link:stolen" in str(plain.errors[0])
    first.wait(lambda: len(first.events) == 2)
    assert [e.sequence_number for e in first.events] == [0, 1]

    # ...and a higher owner level from another client steals the partition from it.
    second = Reader(hub, owner_level=2)
    readers.append(second)
    first.wait(lambda: bool(first.errors))
    message = str(first.errors[0])
    assert "amqp:link:stolen" in message and "higher epoch of '2'" in message
    second.wait(lambda: len(second.events) == 2)
    eventhub_emulator.wait_for_readers(hub.name, "0", 1)

    lower = Reader(hub, owner_level=1, client_kwargs={"retry_total": 0})
    readers.append(lower)
    lower.wait(lambda: bool(lower.errors))
    assert "higher epoch '2' already exists" in str(lower.errors[0])
    non_epoch = Reader(hub, client_kwargs={"retry_total": 0})
    readers.append(non_epoch)
    non_epoch.wait(lambda: bool(non_epoch.errors))
    assert "non-epoch receiver is not allowed" in str(non_epoch.errors[0])
    assert not second.errors
    hub.send("0", [b"c"])
    second.wait(lambda: len(second.events) == 3)
    assert lower.events == [] and non_epoch.events == []


def test_sixth_reader_is_refused(
    make_eventhub: MakeHub, eventhub_emulator: EmulatorHandle, readers: list[Reader]
) -> None:
    hub = make_eventhub(partitions=2, consumer_groups=("other",))
    hub.send("0", [b"x"])
    for _ in range(MAX_CONCURRENT_READERS):
        readers.append(Reader(hub))
    eventhub_emulator.wait_for_readers(hub.name, "0", 5)
    sixth = Reader(hub, client_kwargs={"retry_total": 0})
    readers.append(sixth)
    sixth.wait(lambda: bool(sixth.errors))
    message = str(sixth.errors[0])
    assert "amqp:resource-limit-exceeded" in message
    assert "maximum number of allowed receivers per partition in a consumer group which is 5" in (
        message
    )
    assert all(len(r.events) == 1 for r in readers[:5])
    # The quota is per partition and per consumer group.
    assert len(hub.receive("0", "-1", 1, consumer_group="other")) == 1
    assert hub.receive("1", "-1", 0) == []
    # A slot frees up when a reader leaves.
    readers[0].close()
    eventhub_emulator.wait_for_readers(hub.name, "0", 4)
    assert len(hub.receive("0", "-1", 1)) == 1


def test_runtime_metrics_when_asked(make_eventhub: MakeHub, readers: list[Reader]) -> None:
    hub = make_eventhub(partitions=1)
    hub.send("0", [f"m{i}".encode() for i in range(5)])
    with hub.producer() as producer:
        props = producer.get_partition_properties("0")
    tracked = Reader(hub, track_last_enqueued_event_properties=True)
    plain = Reader(hub)
    readers += [tracked, plain]
    tracked.wait(lambda: len(tracked.events) == 5)
    plain.wait(lambda: len(plain.events) == 5)
    now = dt.datetime.now(dt.timezone.utc)
    last = tracked.contexts[-1]
    assert last["sequence_number"] == 4 == props["last_enqueued_sequence_number"]
    assert last["offset"] == props["last_enqueued_offset"] == tracked.events[4].offset
    assert last["enqueued_time"] == props["last_enqueued_time_utc"]
    assert abs((now - last["retrieval_time"]).total_seconds()) < 30
    assert all(c == {} or c is None for c in plain.contexts)
    # Later deliveries report the partition's new end.
    hub.send("0", [b"m5", b"m6"])
    tracked.wait(lambda: len(tracked.events) == 7)
    assert tracked.contexts[-1]["sequence_number"] == 6
