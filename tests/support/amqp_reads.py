"""Reading the emulator through the reader's own receiver: numbered bodies and a sender, a
one-partition hub on the TLS-only emulator, a spy on the reader's connections, and the
lost-connection scenario both the Python path's tests and the native step's run."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from dagster_eventhub_ingest.resources.amqp.connection import Connection, Endpoint
from dagster_eventhub_ingest.resources.eventhubs_source import PartitionRange, read_range

__all__ = [
    "RECONNECT_COUNT",
    "Connections",
    "bodies",
    "read_range_reconnecting",
    "send_all",
    "tls_hub_with",
]

#: Events of the lost-connection scenario.
RECONNECT_COUNT = 1500


def bodies(count: int) -> list[bytes]:
    """Numbered bodies: mostly 1 KB, some empty, some past a TLS record or the whole buffer."""
    sizes = {7: 0, 100: 20_000, 250: 300_000, 251: 255, 252: 256}
    return [f"{n:06d}".encode() + bytes([n % 256]) * sizes.get(n, 1018) for n in range(count)]


def send_all(producer: Any, items: list[bytes], partition_id: str = "0") -> None:
    from azure.eventhub import EventData

    with producer:
        batch = producer.create_batch(partition_id=partition_id)
        for body in items:
            try:
                batch.add(EventData(body))
            except ValueError:
                producer.send_batch(batch)
                batch = producer.create_batch(partition_id=partition_id)
                batch.add(EventData(body))
        producer.send_batch(batch)


class Connections:
    """Every reader connection opened while it is installed, every flow they sent, and the
    start filter of every partition link attached."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from dagster_eventhub_ingest.resources.amqp.receiver import PartitionReceiver

        self.opened: list[Connection] = []
        self.flows: list[dict[str, int]] = []
        self.filters: list[str] = []
        open_ = Connection.open
        send_flow = Connection.send_flow
        attach = PartitionReceiver.attach

        def attached(link: PartitionReceiver) -> None:
            self.filters.append(link.filter)
            attach(link)

        monkeypatch.setattr(PartitionReceiver, "attach", attached)

        def opened(conn: Connection) -> None:
            self.opened.append(conn)
            open_(conn)

        def flowed(conn: Connection, **link_fields: int) -> None:
            self.flows.append(link_fields)
            send_flow(conn, **link_fields)

        monkeypatch.setattr(Connection, "open", opened)
        monkeypatch.setattr(Connection, "send_flow", flowed)


def tls_hub_with(
    tls_emulator: tuple[Any, str], items: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> Any:
    """A one-partition hub on the TLS-only emulator holding ``items`` (stored as sent, not
    through the SDK: before 5.13 it reaches a custom endpoint over WebSockets only); the
    settings to read it (every connection made in this test dials the emulator's TLS port and
    trusts the test CA: the reader's, and the SDK's management calls)."""
    from dagster_eventhub_ingest.resources.amqp.framing import encode_section
    from dagster_eventhub_ingest.resources.settings import EventHubSettings

    emu, ca = tls_emulator
    assert "UseDevelopmentEmulator" not in emu.connection_string
    # The SDK dials the TLS port of the Endpoint's host only through custom_endpoint_address.
    tls: dict[str, Any] = {
        "connection_verify": ca,
        "custom_endpoint_address": f"sb://127.0.0.1:{emu.port}",
    }
    hub = emu.create_hub(partitions=1)
    emu.enqueue(hub.name, "0", [encode_section(0x75, body) for body in items])
    consumer_client = EventHubSettings.consumer_client
    monkeypatch.setattr(
        EventHubSettings, "consumer_client", lambda self, **kw: consumer_client(self, **tls, **kw)
    )
    endpoint_of = Endpoint.of.__func__  # type: ignore[attr-defined]

    def at_the_emulator(cls: type[Endpoint], settings: Any) -> Endpoint:
        service = endpoint_of(cls, settings)
        assert service.tls and service.port == 5671  # where the service would be
        return Endpoint("127.0.0.1", emu.port, True, service.hostname, ca)

    monkeypatch.setattr(Endpoint, "of", classmethod(at_the_emulator))
    return EventHubSettings(eventhub_name=hub.name, connection_string=emu.connection_string)


def read_range_reconnecting(make_eventhub: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The connection dies mid-range (with frames still buffered): the reader connects again at
    the next sequence number it has not seen, and every event arrives once (asserted)."""
    hub = make_eventhub(partitions=1)
    items = bodies(RECONNECT_COUNT)
    send_all(hub.producer(), items)
    spy = Connections(monkeypatch)
    rng = PartitionRange("0", 0, RECONNECT_COUNT - 1)
    rows: list[dict[str, Any]] = []
    for batch in read_range(hub.settings(), rng, batch_rows=200, prefetch=100):
        rows += batch.to_pylist()
        if len(spy.opened) == 1 and len(rows) >= 400:
            sock = spy.opened[0].sock
            assert sock is not None
            sock.shutdown(socket.SHUT_RDWR)
    assert [row["sequenceNumber"] for row in rows] == list(range(RECONNECT_COUNT))
    assert [row["body"] for row in rows] == items
    assert len(spy.opened) == 2
    # The second link starts at the first event the first one did not deliver, inclusive.
    first, second = spy.filters
    assert first == "amqp.annotation.x-opt-sequence-number >= '0'"
    resumed = int(second.split("'")[1])
    assert second == f"amqp.annotation.x-opt-sequence-number >= '{resumed}'" and resumed >= 400
