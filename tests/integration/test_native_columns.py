"""The reader's native step (eventhubs_source/fastpath/_amqp_columns.c) against the Python path.

Whatever frame the native ``scan`` takes must come out exactly as the Python path makes it
(the transfer's fields, ``decode_event``, ``ArrowBuilder.add_event``): the same row, the same
delivery tag, the same place in the buffer after it. Frames it refuses are the Python path's
(it stops before them), and the events Event Hubs sends are never refused. Then whole reads
through the emulator, native against pure Python, and the module's build and load.
"""

from __future__ import annotations

import logging
import struct
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from azure.eventhub._pyamqp._encode import encode_payload
from azure.eventhub._pyamqp.message import Header, Message, Properties
from azure.eventhub._pyamqp.types import TYPE, VALUE, AMQPTypes
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from dagster_eventhub_ingest.resources.amqp.framing import parse_performative, transfer_header
from dagster_eventhub_ingest.resources.eventhubs_source import (
    PartitionRange,
    read_range,
)
from dagster_eventhub_ingest.resources.eventhubs_source.events import ArrowBuilder, ColumnRows
from dagster_eventhub_ingest.resources.eventhubs_source.fastpath import loader
from dagster_eventhub_ingest.resources.eventhubs_source.message import decode_event
from dagster_eventhub_ingest.resources.eventhubs_source.schema import source_arrow_schema
from tests.support.amqp_reads import bodies, read_range_reconnecting, send_all, tls_hub_with

CHANNEL, HANDLE = 5, 1
SCHEMA = source_arrow_schema()


def _typed(kind: str, value: Any) -> dict[str, Any]:
    return {TYPE: kind, VALUE: value}


def event_message(
    seq: int,
    body: bytes | list[bytes] = b"body",
    *,
    offset: Any = "default",
    when: Any = 1_700_000_000_123,
    pkey: Any = None,
    publisher: Any = None,
    extra: dict[bytes, Any] | None = None,
    **sections: Any,
) -> Message:
    """A message as Event Hubs delivers it: typed annotations, data sections."""
    ann: dict[Any, Any] = {b"x-opt-sequence-number": _typed(AMQPTypes.long, seq)}
    ann[b"x-opt-offset"] = (
        _typed(AMQPTypes.string, str(seq * 1024)) if offset == "default" else offset
    )
    if when is not None:
        ann[b"x-opt-enqueued-time"] = (
            _typed(AMQPTypes.timestamp, when) if isinstance(when, int) else when
        )
    if pkey is not None:
        ann[b"x-opt-partition-key"] = pkey
    if publisher is not None:
        ann[b"x-opt-publisher"] = publisher
    ann.update(extra or {})
    data = [body] if isinstance(body, bytes) else body
    return Message(message_annotations=ann, data=data, **sections)


def frame(message: Message, delivery_id: int, *, more: bool = False) -> bytes:
    payload = bytes(encode_payload(bytearray(), message))
    return transfer_header(CHANNEL, HANDLE, delivery_id, len(payload), more) + payload


def encodable_frames(messages: list[Message]) -> list[bytes]:
    """Frames of generated messages; hypothesis drops those pyamqp's encoder refuses."""
    try:
        return [frame(m, i) for i, m in enumerate(messages)]
    except (ValueError, TypeError, struct.error, OverflowError):
        reject()
        raise AssertionError("unreachable") from None


def python_path(frames: list[bytes]) -> tuple[pa.RecordBatch, list[bytes]]:
    """What the Python path makes of ``frames``: the batch of their rows, their delivery tags."""
    builder = ArrowBuilder("7", SCHEMA)
    tags = []
    for f in frames:
        kind, fields, at = parse_performative(f[8:])
        assert kind == 0x14
        event = decode_event(f[8 + at :])
        builder.add_event(event, event.seq)
        tags.append(fields[2])
    return builder.flush(), tags


def scan(native: Any, buf: bytes | bytearray, start: int = 0, end: int | None = None, **kw: Any):
    tags: set[bytes] = set()
    got = native.scan(
        bytearray(buf) if isinstance(buf, bytes) else buf,
        start,
        len(buf) if end is None else end,
        kw.get("channel", CHANNEL),
        kw.get("handle", HANDLE),
        kw.get("limit", 10_000),
        tags,
    )
    return got, tags


def assert_taken_as_python_does(native: Any, frames: list[bytes]) -> int:
    """Scan the frames back to back: the frames taken equal the Python path's; returns how many."""
    got, tags = scan(native, b"".join(frames))
    if got is None:
        return 0
    n, new_start, last_p, last_end, last_id, columns = got
    assert 0 < n <= len(frames)
    assert new_start == last_end == sum(map(len, frames[:n]))
    assert last_p == new_start - len(frames[n - 1]) + 8
    expected, expected_tags = python_path(frames[:n])
    builder = ArrowBuilder("7", SCHEMA)
    builder.add_rows(ColumnRows(columns))
    batch = builder.flush()
    assert batch.equals(expected), (batch.to_pylist()[:2], expected.to_pylist()[:2])
    assert tags == set(expected_tags)
    assert last_id == parse_performative(frames[n - 1][8:])[1][1]
    return n


# -- frame by frame ----------------------------------------------------------------------------


def test_the_events_event_hubs_sends_are_all_taken(native: Any) -> None:
    """Every shape of an event the service sends: bodies empty to 70 KB, in one data section or
    several, a partition key, a publisher, no enqueued time, null annotations, wide encodings,
    a header, delivery annotations, a footer, empty and full properties and application
    properties, other annotations (IoT Hub's)."""
    messages = [
        event_message(0),
        event_message(1, b""),
        event_message(2, b"x" * 70_000),
        event_message(3, [b"a" * 10, b"", b"b" * 300]),
        event_message(4, pkey=_typed(AMQPTypes.string, "device-é-42")),
        event_message(5, publisher=_typed(AMQPTypes.string, "pub")),
        event_message(6, when=None, offset=None),
        event_message(7, offset=_typed(AMQPTypes.symbol, b"77")),
        event_message(8, pkey=_typed(AMQPTypes.string, "k" * 300)),  # str32
        event_message(9, header=Header(durable=True, priority=4, ttl=60_000)),
        event_message(10, delivery_annotations={b"x-opt-lock": _typed(AMQPTypes.long, 1)}),
        event_message(11, footer={b"f": _typed(AMQPTypes.string, "x")}),
        event_message(12, properties=Properties()),
        event_message(13, application_properties={}),
        event_message(14, when=_typed(AMQPTypes.long, -5)),  # before 1970, as a long
        event_message(200, when=_typed(AMQPTypes.int, 5)),  # integers of any width
        event_message(  # application properties of every type the Python path writes alike
            300,
            application_properties={
                "s": "text-é",
                "n": _typed(AMQPTypes.long, -(2**40)),
                "i": 7,
                "t": True,
                "f": False,
                "none": None,
                "b": b"bytes",
                "u": uuid.UUID(int=2**100 + 5),
                "ts": _typed(AMQPTypes.timestamp, 1_700_000_000_000),
                "ul": _typed(AMQPTypes.ulong, 2**64 - 1),
                "": "empty key",
            },
        ),
        event_message(  # message properties: systemProperties, after other annotations
            301,
            extra={
                b"iothub-connection-device-id": _typed(AMQPTypes.string, "dev-1"),
                b"iothub-enqueuedtime": _typed(AMQPTypes.timestamp, 1_700_000_000_001),
                7: _typed(AMQPTypes.string, "an int key"),
                b"x-opt-null": None,
            },
            properties=Properties(
                message_id=uuid.UUID(int=9),
                user_id=b"user",
                correlation_id=42,
                content_type=b"application/json",
                content_encoding=b"utf-8",
                creation_time=1_700_000_000_002,
                group_sequence=3,
            ),
        ),
        event_message(302, properties=Properties(message_id=b"m-1", subject=b"s")),
        event_message(2**40, when=_typed(AMQPTypes.uint, 2**32 - 1)),
    ]
    frames = [frame(m, 100 + i) for i, m in enumerate(messages)]
    assert assert_taken_as_python_does(native, frames) == len(frames)


@pytest.mark.parametrize(
    "odd",
    [
        event_message(0, application_properties={"k": [1, 2]}),  # a list: JSON, Python's
        event_message(0, application_properties={"k": {"a": 1}}),  # a map: JSON, Python's
        event_message(0, application_properties={"k": (5, "described")}),  # described
        event_message(0, application_properties={"k": 5e-324}),  # subnormal: Java's 2 digits
        event_message(0, application_properties={"k": _typed(AMQPTypes.timestamp, -(2**50))}),
        event_message(0, properties=Properties(to=b"\xff\xfe")),  # a string not UTF-8
        Message(message_annotations={b"x-opt-offset": "1"}, data=[b"no sequence number"]),
        event_message(0, offset=_typed(AMQPTypes.long, 5)),  # an offset the service never sends
        event_message(0, pkey=_typed(AMQPTypes.binary, b"\xff\xfe")),  # a binary partition key
        event_message(0, when=_typed(AMQPTypes.boolean, True)),  # a time that is not one
        Message(message_annotations={b"x-opt-sequence-number": _typed(AMQPTypes.long, 0)}, value=5),
        Message(
            message_annotations={b"x-opt-sequence-number": _typed(AMQPTypes.long, 0)},
            sequence=[[1, 2]],
        ),
        Message(message_annotations={b"x-opt-sequence-number": _typed(AMQPTypes.long, 0)}),
        event_message(0, when=_typed(AMQPTypes.timestamp, 2**62)),  # past 64-bit microseconds
    ],
)
def test_what_it_leaves_to_the_python_path_stops_the_run_there(native: Any, odd: Message) -> None:
    """Such a frame ends the run before it; the run goes on from the frame after it."""
    frames = [frame(event_message(i), i) for i in range(3)]
    frames.append(frame(odd, 3))
    frames += [frame(event_message(i), i) for i in range(4, 6)]
    assert assert_taken_as_python_does(native, frames) == 3
    buf = b"".join(frames)
    start = sum(map(len, frames[:4]))
    got, _ = scan(native, buf, start)
    assert got is not None and got[0] == 2 and got[1] == len(buf)


def test_other_frames_stop_the_run(native: Any) -> None:
    """A message in several frames, another handle or channel, an aborted or stateful
    transfer, another performative: each ends the run (the Python path takes it)."""
    plain = frame(event_message(0), 0)
    payload = bytes(encode_payload(bytearray(), event_message(1)))
    several = frame(event_message(1), 1, more=True)
    other_handle = transfer_header(CHANNEL, HANDLE + 1, 1, len(payload), False) + payload
    other_channel = transfer_header(CHANNEL + 1, HANDLE, 1, len(payload), False) + payload
    aborted = bytearray(frame(event_message(1), 1))
    aborted[8 + 3 + 3 + 5 + 5 + 6 + 1 + 1 + 1 + 1 + 1 + 1] = 0x41  # the aborted flag
    flow = bytes.fromhex("0000001002000005") + bytes.fromhex("005313c0030140404040")[:8]
    for second in [several, other_handle, other_channel, bytes(aborted), flow]:
        got, _ = scan(native, plain + second + plain)
        assert got is not None and got[0] == 1 and got[1] == len(plain), second.hex()
    assert scan(native, plain, limit=0)[0] is None


def test_only_whole_frames_inside_the_filled_part_are_read(native: Any) -> None:
    """Cut anywhere, a buffer yields the frames whole before the cut, and nothing past ``end``
    is looked at (the bytes after it are garbage here)."""
    frames = [frame(event_message(i, bytes([i]) * (i * 37)), i) for i in range(12)]
    buf = b"".join(frames)
    ends = [sum(map(len, frames[:k])) for k in range(len(frames) + 1)]
    for cut in range(0, len(buf), 7):
        whole = max(k for k, e in enumerate(ends) if e <= cut)
        padded = bytearray(buf[:cut] + b"\xa1\xff" * 64)
        got, _ = scan(native, padded, 0, cut)
        assert (0 if got is None else got[0]) == whole, cut


def test_a_run_is_at_most_its_limit_and_tags_go_to_the_links_set(native: Any) -> None:
    frames = [frame(event_message(i), i) for i in range(10)]
    got, tags = scan(native, b"".join(frames), limit=4)
    assert got[0] == 4 and got[1] == sum(map(len, frames[:4])) and len(tags) == 4
    rows = ColumnRows(got[5])
    assert (rows.first_seq, rows.last_seq, rows.contiguous) == (0, 3, True)
    assert rows.segments() == [(0, 4, 0)]


def test_redelivered_sequence_numbers_split_a_run_into_segments(native: Any) -> None:
    frames = [frame(event_message(s), i) for i, s in enumerate([5, 6, 7, 3, 4, 9])]
    got, _ = scan(native, b"".join(frames))
    rows = ColumnRows(got[5])
    assert not rows.contiguous
    assert rows.segments() == [(0, 3, 5), (3, 5, 3), (5, 6, 9)]
    assert rows.sequence_numbers() == [5, 6, 7, 3, 4, 9]


texts = st.one_of(
    st.none(),
    st.text(max_size=40).map(lambda t: _typed(AMQPTypes.string, t)),
    st.text(max_size=300).map(lambda t: _typed(AMQPTypes.string, t)),
    st.binary(max_size=20).map(lambda b: _typed(AMQPTypes.symbol, b)),
    st.binary(max_size=20).map(lambda b: _typed(AMQPTypes.binary, b)),
    st.integers(-(2**63), 2**63 - 1).map(lambda v: _typed(AMQPTypes.long, v)),
)
times = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**63 - 1).map(lambda v: _typed(AMQPTypes.timestamp, v)),
    st.integers(-(2**53), 2**53).map(lambda v: _typed(AMQPTypes.long, v)),
    st.integers(-(2**31), 2**31 - 1).map(lambda v: _typed(AMQPTypes.int, v)),
)
values = st.one_of(
    st.none(),
    st.text(max_size=30),
    st.binary(max_size=30),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(),
    st.uuids(),
    st.integers(-(2**63), 2**63 - 1).map(lambda v: _typed(AMQPTypes.timestamp, v)),
    st.integers(0, 2**64 - 1).map(lambda v: _typed(AMQPTypes.ulong, v)),
    st.integers(0, 255).map(lambda v: _typed(AMQPTypes.ubyte, v)),
    st.lists(st.integers(0, 9), max_size=2),
)
events = st.builds(
    event_message,
    st.integers(-(2**63), 2**63 - 1),
    st.one_of(st.binary(max_size=600), st.lists(st.binary(max_size=300), max_size=9)),
    offset=st.one_of(st.just("default"), texts),
    when=times,
    pkey=texts,
    publisher=texts,
    extra=st.one_of(st.none(), st.dictionaries(st.binary(max_size=12), values, max_size=4)),
    header=st.one_of(st.none(), st.booleans().map(lambda d: Header(durable=d))),
    properties=st.one_of(
        st.none(),
        st.just(Properties()),
        st.builds(
            Properties,
            message_id=st.one_of(st.none(), st.binary(max_size=20), st.uuids()),
            to=st.one_of(st.none(), st.binary(max_size=20)),
            content_type=st.one_of(st.none(), st.binary(max_size=20)),
            creation_time=st.one_of(st.none(), st.integers(0, 2**62)),
            group_sequence=st.one_of(st.none(), st.integers(0, 2**32 - 1)),
        ),
    ),
    application_properties=st.one_of(
        st.none(), st.dictionaries(st.text(max_size=12), values, max_size=6)
    ),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(events, min_size=1, max_size=6))
def test_any_events_are_taken_as_the_python_path_makes_them(native: Any, messages: list) -> None:
    frames = encodable_frames(messages)
    assert_taken_as_python_does(native, frames)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(events, min_size=1, max_size=3), st.data())
def test_mutated_frames_are_taken_only_as_the_python_path_makes_them(
    native: Any, messages: list, data: Any
) -> None:
    """Bytes changed anywhere (sizes, constructors, counts): whatever is still taken equals what
    the Python path decodes from the very same bytes."""
    frames = [bytearray(f) for f in encodable_frames(messages)]
    for _ in range(data.draw(st.integers(1, 4))):
        f = frames[data.draw(st.integers(0, len(frames) - 1))]
        at = data.draw(st.integers(8, len(f) - 1))
        f[at] = data.draw(st.sampled_from([0x00, 0x40, 0x41, 0x45, 0x53, 0x81, 0xA1, 0xC1, 0xFF]))
    got, _ = scan(native, b"".join(frames))
    if got is None:
        return
    n = got[0]
    try:
        python_path([bytes(f) for f in frames[:n]])
    except Exception as exc:
        pytest.fail(f"the native step took a frame the Python path fails on: {exc!r}")
    assert_taken_as_python_does(native, [bytes(f) for f in frames])


def test_a_builder_keeps_the_order_of_rows_and_events_added_one_by_one(native: Any) -> None:
    """Native runs, sliced, between events added one by one: one batch in arrival order, and
    the statistics of what was flushed."""
    run = ColumnRows(scan(native, b"".join(frame(event_message(s), s) for s in range(10)))[0][5])
    builder = ArrowBuilder("7", SCHEMA)
    lone = decode_event(bytes(encode_payload(bytearray(), event_message(10))))
    builder.add_rows(run, 0, 4)
    builder.add_event(lone, 10)
    builder.add_rows(run, 4, 10)
    builder.add_event(lone, 10)
    assert len(builder) == 12 and builder.body_bytes == 12 * 4
    batch = builder.flush()
    assert batch.column("sequenceNumber").to_pylist() == [0, 1, 2, 3, 10, 4, 5, 6, 7, 8, 9, 10]
    assert builder.summary() == (12, 48, 0, 10, "10240", *[1_700_000_000_123_000] * 2)
    assert len(builder) == 0 and builder.body_bytes == 0
    assert run.rows_reaching(0, 10, 9) == 3 and run.rows_reaching(2, 5, 1_000) == 5


# -- whole reads through the emulator ----------------------------------------------------------


def _mixed_events(count: int) -> list[Any]:
    from azure.eventhub import EventData

    out = []
    for n in range(count):
        size = {7: 0, 100: 20_000, 250: 300_000}.get(n, 900)
        body = f"{n:06d}".encode() + bytes([n % 251]) * size
        event = EventData(body)
        if n % 97 == 5:
            event.properties = {"n": n}
        if n % 89 == 3:
            event.message_id = f"m{n}"
        out.append(event)
    return out


def _send(hub: Any, items: list[Any]) -> None:
    with hub.producer() as producer:
        for key in (None, "pk-é"):
            batch = producer.create_batch(partition_id="0") if key is None else None
            batch = batch or producer.create_batch(partition_key=key)
            for event in items[: len(items) // 2] if key is None else items[len(items) // 2 :]:
                try:
                    batch.add(event)
                except ValueError:
                    producer.send_batch(batch)
                    batch = (
                        producer.create_batch(partition_id="0")
                        if key is None
                        else producer.create_batch(partition_key=key)
                    )
                    batch.add(event)
            producer.send_batch(batch)


@pytest.fixture
def counted_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows of every native run read (ColumnRows made) in this test."""
    runs: list[int] = []
    init = ColumnRows.__init__

    def counted(self: ColumnRows, columns: dict[str, Any]) -> None:
        init(self, columns)
        runs.append(self.rows)

    monkeypatch.setattr(ColumnRows, "__init__", counted)
    return runs


def _read(monkeypatch: pytest.MonkeyPatch, mode: str, settings: Any, rng: Any, **kw: Any):
    monkeypatch.setenv(loader.NATIVE_ENV, mode)
    loader.reset_for_tests()
    try:
        return list(read_range(settings, rng, **kw))
    finally:
        loader.reset_for_tests()


@pytest.mark.integration
def test_a_read_is_the_same_native_or_not(
    make_eventhub: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, counted_runs: list[int]
) -> None:
    """1,200 events of one partition (application and message properties, partition keys,
    empty, 20 KB and 300 KB bodies: events the native step takes and events it leaves), read
    whole and in sub-ranges with small batches: the same batches either way."""
    hub = make_eventhub(partitions=1)
    _send(hub, _mixed_events(1200))
    settings_ = hub.settings()
    for rng, kw in [
        (PartitionRange("0", 0, 1199), {}),
        (PartitionRange("0", 333, 1020), {"batch_rows": 100}),
        (PartitionRange("0", 1, 600), {"batch_bytes": 50_000, "prefetch": 50}),
    ]:
        plain = _read(monkeypatch, "0", settings_, rng, **kw)
        assert not counted_runs
        fast = _read(monkeypatch, "1", settings_, rng, **kw)
        assert sum(counted_runs) > rng.count // 2, "the native step took few events"
        counted_runs.clear()
        assert [b.num_rows for b in fast] == [b.num_rows for b in plain]
        assert pa.Table.from_batches(fast).equals(pa.Table.from_batches(plain))
        seqs = [s for b in fast for s in b.column("sequenceNumber").to_pylist()]
        assert seqs == list(range(rng.start, rng.end + 1))


# -- building and loading -----------------------------------------------------------------------


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    monkeypatch.setenv("EHINGEST_CACHE_DIR", str(tmp_path))
    loader.reset_for_tests()
    yield tmp_path
    loader.reset_for_tests()


def test_off_means_pure_python(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(loader.NATIVE_ENV, "0")
    assert loader.amqp_columns() is None
    assert not (fresh / "native").exists()


def test_built_once_per_host_then_loaded(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(loader.NATIVE_ENV, raising=False)
    module = loader.amqp_columns()
    assert module is not None and callable(module.scan)
    (built,) = (fresh / "native").glob("_amqp_columns-*")
    assert built == loader.target_path() and built.stat().st_size > 0
    mtime = built.stat().st_mtime_ns
    loader.reset_for_tests()
    monkeypatch.setenv("CC", "false")  # a second process would not compile again
    assert loader.amqp_columns() is not None and built.stat().st_mtime_ns == mtime


def test_a_host_that_cannot_compile_reads_in_python_and_says_so(
    fresh: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(loader.NATIVE_ENV, raising=False)
    monkeypatch.setenv("CC", "false")
    with caplog.at_level(
        logging.INFO, logger="dagster_eventhub_ingest.resources.eventhubs_source.fastpath.loader"
    ):
        assert loader.amqp_columns() is None
    assert "native step is off on this host" in caplog.text
    failed = loader.target_path().with_suffix(".failed")
    assert failed.exists()  # not tried again by every task on this host
    monkeypatch.setenv("CC", "cc")
    loader.reset_for_tests()
    assert loader.amqp_columns() is None
    monkeypatch.setenv(loader.NATIVE_ENV, "1")
    with pytest.raises(loader.NativeUnavailableError, match="C compiler"):
        loader.amqp_columns()


def test_an_executor_builds_and_loads_it_from_the_shipped_zip(tmp_path: Path) -> None:
    """Executors import the package from the zip the driver ships
    (resources/spark/code_shipping.py), with no checkout beside them: the C source is read through
    the zip and built into that host's own cache."""
    import os
    import subprocess
    import sys

    from dagster_eventhub_ingest.resources.spark.code_shipping import build_code_zip

    code = build_code_zip(tmp_path / "code")
    probe = (
        "from dagster_eventhub_ingest.resources.eventhubs_source.fastpath import loader\n"
        "m = loader.amqp_columns()\n"
        "print(loader.__file__)\n"
        "print(m.__file__)\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(code),
        "EHINGEST_CACHE_DIR": str(tmp_path / "executor-cache"),
        loader.NATIVE_ENV: "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    module_file, built = done.stdout.split()
    assert module_file.startswith(str(code))  # imported from the zip, not this checkout
    assert built.startswith(str(tmp_path / "executor-cache" / "native"))


def _pull_all(settings: Any, count: int) -> tuple[list[Any], dict[str, Any]]:
    """Every event of ``[0, count)`` through a pull, and its link's and session's state once
    the last one is in (the partition holds no more: no frame arrives after it)."""
    from dagster_eventhub_ingest.resources.eventhubs_source.receiver import _PartitionPull

    items: list[Any] = []
    events = 0  # a native run (ColumnRows) holds many
    pull = _PartitionPull(
        settings,
        "0",
        starting_position=0,
        prefetch=300,
        wait_seconds=10,
        end=count - 1,
        columns=True,
    )
    with pull:
        for batch in pull:
            assert batch, "no event for 10 s"
            items += batch
            events += sum(m.rows if type(m) is ColumnRows else 1 for m in batch)
            if events >= count:
                link, conn = pull._link, pull._conn
                assert link is not None and conn is not None
                state = {
                    "link": (link.delivery_count, link.credit, link.last_seq),
                    "frames": conn.next_incoming_id,
                    "buffered": conn.end - conn.start,
                }
                # Every flow renews the session's window, the link's credit flows too, and
                # when those go depends on how frames arrive: the window is only bounded.
                assert conn.window // 2 <= conn.incoming_window <= conn.window
                return items, state
    raise AssertionError(f"the pull ended after {events} of {count} events")


@pytest.mark.integration
def test_native_runs_leave_the_receivers_state_as_the_python_path_does(
    make_eventhub: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, counted_runs: list[int]
) -> None:
    """The same 1,000 events (two in several frames: 4 KB frames here) through the Python path
    and through native runs: the link counted the same deliveries and credit, the session the
    same frames, and both sent as many flows (the session's window is 64 frames here)."""
    from dagster_eventhub_ingest.resources.amqp import connection

    monkeypatch.setattr(connection, "SESSION_WINDOW", 64)
    monkeypatch.setattr(connection, "MAX_FRAME_SIZE", 64 * 1024)
    flows = [0]
    send_flow = connection.Connection.send_flow

    def counted_flow(self: Any, **link_fields: Any) -> None:
        flows[0] += 1
        send_flow(self, **link_fields)

    monkeypatch.setattr(connection.Connection, "send_flow", counted_flow)
    hub = make_eventhub(partitions=1)
    items = bodies(1000)
    send_all(hub.producer(), items)
    monkeypatch.setenv(loader.NATIVE_ENV, "0")
    loader.reset_for_tests()
    _, python_state = _pull_all(hub.settings(), len(items))
    python_flows, flows[0] = flows[0], 0
    assert not counted_runs
    monkeypatch.setenv(loader.NATIVE_ENV, "1")
    loader.reset_for_tests()
    got, native_state = _pull_all(hub.settings(), len(items))
    loader.reset_for_tests()
    assert sum(counted_runs) > len(items) // 2
    assert native_state == python_state
    assert native_state["link"][2] == len(items) - 1 and native_state["buffered"] == 0
    assert python_flows > 1000 // 64 and abs(flows[0] - python_flows) <= 2
    builder = ArrowBuilder("0", SCHEMA)
    for item in got:
        if type(item) is ColumnRows:
            builder.add_rows(item)
        else:
            builder.add_event(item, item.seq)
    assert builder.flush().column("body").to_pylist() == items


class _FakePull:
    """Stands in for the pull in ``read_range``: hands out the given lists, then silence."""

    items: list[list[Any]] = []

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        pass

    def __enter__(self) -> _FakePull:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def __iter__(self) -> Iterator[list[Any]]:
        yield from self.items
        raise AssertionError("read past the range's end")

    @staticmethod
    def sequence_number(message: Any) -> int | None:
        from dagster_eventhub_ingest.resources.eventhubs_source.receiver import _PartitionPull

        return _PartitionPull.sequence_number(message)

    def close(self, *, wait: bool = True) -> None:
        pass


@pytest.mark.parametrize("as_runs", [True, False])
def test_runs_with_gaps_redeliveries_and_a_tail_past_the_end_read_as_events_do(
    native: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, as_runs: bool
) -> None:
    """Sequence numbers 0-2, 5-6 (3 and 4 missing), 5-7 again (a redelivery), 8-11 (past the
    range [0, 9]): as native runs or as messages one by one, the same rows; the hole is
    skipped and logged (``skip``) or fails the read (``fail``)."""
    from dagster_eventhub_ingest.resources.errors import DataLossError
    from dagster_eventhub_ingest.resources.eventhubs_source import read as read_module
    from dagster_eventhub_ingest.resources.settings import EventHubSettings

    groups = [[0, 1, 2, 5, 6], [5, 6, 7], [8, 9, 10, 11]]

    def as_items(seqs: list[int]) -> list[Any]:
        frames = [frame(event_message(s, bytes([s]) * s), s) for s in seqs]
        if as_runs:
            got, _ = scan(native, b"".join(frames))
            assert got[0] == len(seqs)
            return [ColumnRows(got[5])]
        return [decode_event(f[38:]) for f in frames]

    _FakePull.items = [as_items(g) for g in groups]
    monkeypatch.setattr(read_module, "_PartitionPull", _FakePull)
    monkeypatch.setattr(read_module, "sdk_receive", lambda: False)
    settings_ = EventHubSettings(
        eventhub_name="h",
        connection_string="Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=s",
    )
    rng = PartitionRange("0", 0, 9)
    with caplog.at_level(logging.WARNING):
        batches = list(read_range(settings_, rng, on_data_loss="skip", batch_rows=3))
    rows = [r for b in batches for r in b.to_pylist()]
    assert [r["sequenceNumber"] for r in rows] == [0, 1, 2, 5, 6, 7, 8, 9]
    assert [r["body"] for r in rows] == [bytes([s]) * s for s in [0, 1, 2, 5, 6, 7, 8, 9]]
    assert [b.num_rows for b in batches] == [3, 3, 2]
    assert "sequence numbers [3, 4]" in caplog.text
    with pytest.raises(DataLossError, match=r"sequence numbers \[3, 4\]"):
        list(read_range(settings_, rng, on_data_loss="fail"))


def test_the_cli_builds_it_ahead_and_says_when_it_cannot(
    fresh: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from dagster_eventhub_ingest.cli.main import main

    runner = CliRunner()
    monkeypatch.setenv("CC", "false")
    failed = runner.invoke(main, ["build-reader"])
    assert failed.exit_code == 1 and "cannot be built on this host" in failed.output
    assert "pure Python" in failed.output
    monkeypatch.delenv("CC")
    built = runner.invoke(main, ["build-reader"])  # the failure is not remembered against it
    assert built.exit_code == 0, built.output
    assert str(loader.target_path()) in built.output and loader.target_path().exists()


@pytest.mark.integration
def test_a_native_read_reconnects_and_loses_nothing(
    make_eventhub: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, counted_runs: list[int]
) -> None:
    """The connection dies mid-range with frames still buffered (the Python path's test, with
    the native step on): every event arrives once, on a new connection."""
    monkeypatch.setenv(loader.NATIVE_ENV, "1")
    loader.reset_for_tests()
    try:
        read_range_reconnecting(make_eventhub, monkeypatch)
    finally:
        loader.reset_for_tests()
    assert sum(counted_runs) > 1000


@pytest.mark.integration
def test_a_native_read_over_tls(
    tls_emulator: tuple[Any, str], monkeypatch: pytest.MonkeyPatch, counted_runs: list[int]
) -> None:
    """Over TLS the buffer fills one TLS record at a time: runs are short, rows the same."""
    items = bodies(600)
    settings_ = tls_hub_with(tls_emulator, items, monkeypatch)
    rng = PartitionRange("0", 0, len(items) - 1)
    fast = _read(monkeypatch, "1", settings_, rng)
    assert sum(counted_runs) > len(items) // 2
    assert [b for batch in fast for b in batch.column("body").to_pylist()] == items
