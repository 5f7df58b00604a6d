"""``read_range`` through the reader's own receiver (resources/amqp/) on the emulator: plain TCP
and TLS, a connection lost mid-range, credit that never asks past a range, the session's window,
messages in several frames, batches bounded by bytes, no pandas, the SDK's public receive when
asked for, and a user's own ``EventHubConsumerClient`` in the same process, untouched."""

from __future__ import annotations

import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from dagster_eventhub_ingest.resources.amqp import connection
from dagster_eventhub_ingest.resources.amqp.connection import Connection, Endpoint
from dagster_eventhub_ingest.resources.eventhubs_source import PartitionRange, read_range
from dagster_eventhub_ingest.resources.eventhubs_source.receiver import _PartitionPull
from tests.support.amqp_reads import (
    Connections,
    bodies,
    read_range_reconnecting,
    send_all,
    tls_hub_with,
)


@pytest.fixture(autouse=True)
def python_path_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """These tests prove the Python path (what the native step leaves to it, and what runs on a
    host that cannot build it); tests/integration/test_native_columns.py proves the native step
    equal to it."""
    from dagster_eventhub_ingest.resources.eventhubs_source.fastpath import loader

    monkeypatch.setenv(loader.NATIVE_ENV, "0")
    loader.reset_for_tests()
    yield
    loader.reset_for_tests()


def assert_read_exactly(settings: Any, items: list[bytes], **kwargs: Any) -> list[dict[str, Any]]:
    rng = PartitionRange("0", 0, len(items) - 1)
    rows = [row for batch in read_range(settings, rng, **kwargs) for row in batch.to_pylist()]
    assert [row["sequenceNumber"] for row in rows] == list(range(len(items)))
    assert [row["body"] for row in rows] == items
    return rows


COUNT = 1500


@pytest.mark.integration
def test_read_range_over_plain_tcp(make_eventhub: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = make_eventhub(partitions=1)
    items = bodies(COUNT)
    send_all(hub.producer(), items)
    spy = Connections(monkeypatch)
    assert_read_exactly(hub.settings(), items)
    (conn,) = spy.opened
    assert conn.closed and conn.sock is None  # closed behind the last batch


@pytest.mark.integration
def test_read_range_reconnects_where_it_was(
    make_eventhub: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection dies mid-range (with frames still buffered): the reader connects again at
    the next sequence number it has not seen, and every event arrives once."""
    read_range_reconnecting(make_eventhub, monkeypatch)


@pytest.mark.integration
def test_credit_follows_the_range_and_never_pauses_it(
    make_eventhub: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """350 events in credit windows of 300: the reader tops the credit up once half is used,
    and never grants past the range's last event (the partition holds no more: nothing
    arrives after it, and nothing waits for what cannot come)."""
    hub = make_eventhub(partitions=1)
    items = [f"{n:06d}".encode() + b"x" * 1018 for n in range(350)]
    send_all(hub.producer(), items)
    spy = Connections(monkeypatch)
    assert_read_exactly(hub.settings(), items, prefetch=300)
    grants = [f for f in spy.flows if f.get("handle") == 2]  # the partition's link
    limits = [f["delivery_count"] + f["link_credit"] for f in grants]
    assert grants[0] == {"handle": 2, "delivery_count": 0, "link_credit": 300}
    assert max(limits) == len(items)  # every event asked for, none past the range
    # Topped up before the window was spent (a flow while credit was left: no pause).
    assert any(0 < f["delivery_count"] < 300 for f in grants[1:]), grants


@pytest.mark.integration
def test_the_session_window_is_renewed_and_large_messages_arrive_in_several_frames(
    make_eventhub: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session window of 64 frames and frames of at most 4 KB: the 20 KB and 300 KB events
    come in several frames (joined in order), and the window is renewed as it is spent."""
    monkeypatch.setattr(connection, "SESSION_WINDOW", 64)
    monkeypatch.setattr(connection, "MAX_FRAME_SIZE", 4096)
    hub = make_eventhub(partitions=1)
    items = bodies(300)
    send_all(hub.producer(), items)
    spy = Connections(monkeypatch)
    assert_read_exactly(hub.settings(), items)
    # ~380 frames through a window of 64: the read finishing proves it renewed in time.
    frames = sum(-(-(len(b) + 120) // 4000) for b in items)
    assert len(spy.flows) >= frames // 64


_NO_PANDAS_READ = """
import pickle, sys
from dagster_eventhub_ingest.resources.eventhubs_source import PartitionRange, read_range
settings, count = pickle.loads(sys.stdin.buffer.read())
batches = list(read_range(settings, PartitionRange("0", 0, count - 1)))
print(sorted(m for m in ("pandas", "pyarrow") if m in sys.modules))  # before to_pylist's imports
rows = [row for batch in batches for row in batch.to_pylist()]
assert [r["sequenceNumber"] for r in rows] == list(range(count)), "not every event was read"
assert [r["properties"] for r in rows[:2]] == [[], [("kind", "test"), ("n", "1")]], rows[:2]
"""


@pytest.mark.integration
def test_a_reader_builds_its_batches_without_importing_pandas(make_eventhub: Any) -> None:
    """pyarrow's ``pa.array`` imports pandas (~0.26 s and ~44 MB per Spark Python worker); the
    reader's batches, application properties and all, are built without it."""
    import pickle

    from azure.eventhub import EventData

    hub = make_eventhub(partitions=1)
    with hub.producer() as producer:
        batch = producer.create_batch(partition_id="0")
        for n in range(50):
            event = EventData(f"event {n}")
            event.properties = {"kind": "test", "n": n} if n % 2 else {}
            batch.add(event)
        producer.send_batch(batch)
    done = subprocess.run(
        [sys.executable, "-c", _NO_PANDAS_READ],
        input=pickle.dumps((hub.settings(), 50)),
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.decode().split() == ["['pyarrow']"]


@pytest.mark.integration
def test_a_batch_ends_at_the_event_that_reaches_its_byte_bound(make_eventhub: Any) -> None:
    """Large events end a batch before its row count: a task never holds 8192 events of up to
    1 MB, and no array passes Arrow's 2 GiB of 32-bit offsets."""
    hub = make_eventhub(partitions=1)
    items = bodies(300)  # 1 KB bodies, one of 20 KB, one of 300 KB
    send_all(hub.producer(), items)
    batches = list(read_range(hub.settings(), PartitionRange("0", 0, 299), batch_bytes=50_000))
    sizes = [[len(b) for b in batch.column("body").to_pylist()] for batch in batches]
    assert [b for batch in batches for b in batch.column("body").to_pylist()] == items
    for full in sizes[:-1]:  # each ends at the first event that reaches the bound
        assert sum(full) >= 50_000 > sum(full[:-1]), full
    assert len(batches) >= 300 * 1024 // 50_000


@pytest.mark.integration
def test_the_sdk_receive_when_asked_for(
    make_eventhub: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EHINGEST_SDK_RECEIVE", "1")
    hub = make_eventhub(partitions=1)
    items = bodies(300)
    send_all(hub.producer(), items)
    spy = Connections(monkeypatch)
    assert_read_exactly(hub.settings(), items)
    assert spy.opened == []


@pytest.mark.integration
def test_read_range_over_tls(
    tls_emulator: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    items = bodies(COUNT)
    settings = tls_hub_with(tls_emulator, items, monkeypatch)
    spy = Connections(monkeypatch)
    sockets: list[Any] = []
    fill = Connection.fill

    def seen(conn: Connection, timeout: float) -> bool:
        sockets.append(conn.sock)
        return fill(conn, timeout)

    monkeypatch.setattr(Connection, "fill", seen)
    assert_read_exactly(settings, items)
    assert len(spy.opened) == 1
    assert sockets and all(isinstance(s, ssl.SSLSocket) for s in sockets)


@pytest.mark.integration
def test_a_tls_certificate_the_reader_does_not_trust_is_refused(
    tls_emulator: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dagster_eventhub_ingest.resources.errors import EventHubUnavailableError

    settings = tls_hub_with(tls_emulator, [b"x"], monkeypatch)
    emu, _ca = tls_emulator
    monkeypatch.setattr(
        Endpoint, "of", classmethod(lambda _c, _s: Endpoint("127.0.0.1", emu.port, True, "x"))
    )
    started = time.monotonic()
    with pytest.raises(EventHubUnavailableError, match="CERTIFICATE_VERIFY_FAILED"):
        list(read_range(settings, PartitionRange("0", 0, 0), receive_timeout=5))
    assert time.monotonic() - started < 3  # no reconnect cures it


# -- a user's own SDK client in the same process ---------------------------------------------------

_SIDE_BY_SIDE = """
import json, sys, threading
import azure.eventhub
from azure.eventhub import EventHubConsumerClient
from dagster_eventhub_ingest.resources.settings import EventHubSettings
from dagster_eventhub_ingest.resources.eventhubs_source import PartitionRange, read_range

cs, hub = sys.argv[1], sys.argv[2]

def modules():
    # Every name of every azure module, and what it is bound to.
    return {(m, k): id(v) for m, mod in list(sys.modules.items()) if m.startswith("azure")
            for k, v in list(vars(mod).items())}

def users_receive(partition):
    client = EventHubConsumerClient.from_connection_string(
        cs, consumer_group="$Default", eventhub_name=hub)
    got = []
    def on_event(_ctx, event):
        got.append([event.body_as_str(), {str(k): str(v) for k, v in event.properties.items()},
                    event.sequence_number, event.offset, str(event.enqueued_time),
                    str(event.partition_key), sorted(str(k) for k in event.system_properties)])
        if len(got) == 20:
            client.close()
    client.receive(on_event=on_event, partition_id=partition, starting_position="-1")
    return got

settings = EventHubSettings(eventhub_name=hub, connection_string=cs)
before = users_receive("0")
names = modules()
threads = []
out = {}
def ours():
    out["ours"] = sum(b.num_rows for b in read_range(settings, PartitionRange("0", 0, 19)))
t = threading.Thread(target=ours); t.start()
during = users_receive("0")
t.join()
after = users_receive("0")
changed = sorted(f"{m}.{k}" for (m, k), i in modules().items() if names.get((m, k), i) != i)
print(json.dumps({"same": before == during == after, "ours": out["ours"], "changed": changed,
                  "sample": before[1]}))
"""


@pytest.mark.integration
def test_a_users_own_consumer_client_is_untouched(make_eventhub: Any) -> None:
    """A user's ``EventHubConsumerClient.receive`` before, during and after a read in the same
    process gets the same ``EventData`` (as the SDK decodes them), and no name of any azure
    module was rebound by the reader."""
    import json

    from azure.eventhub import EventData

    hub = make_eventhub(partitions=1)
    with hub.producer() as producer:
        events = []
        for n in range(20):
            event = EventData(f"event {n}")
            event.properties = {"k": "v", "n": n}
            events.append(event)
        producer.send_batch(events, partition_key="device-1")
    done = subprocess.run(
        [sys.executable, "-c", _SIDE_BY_SIDE, hub.connection_string, hub.name],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["ours"] == 20
    assert result["same"], result
    assert result["changed"] == []
    # As the SDK decodes them: string keys and values as bytes.
    assert result["sample"][:2] == ["event 1", {"b'k'": "b'v'", "b'n'": "1"}]


@pytest.mark.integration
def test_a_pull_ends_quietly_when_closed_mid_wait(make_eventhub: Any) -> None:
    """close() from the consumer (a reader done with its range) stops the pull at once."""
    hub = make_eventhub(partitions=1)
    hub.send("0", [b"only"])
    pull = _PartitionPull(hub.settings(), "0", starting_position=0, prefetch=5, wait_seconds=30)
    with pull:
        for events in pull:
            assert [e.body for e in events] == [b"only"]
            pull.close()
    assert pull._conn is None
