"""The connector's values for every AMQP type, on the native and the pure-Python path.

The golden corpus (tests/support/amqp_corpus.py) frame by frame: the Python path
(``message.decode_event``) gives each golden row; the native step gives the same row for every
message it takes (it may leave one to Python, never write it otherwise). The texts themselves
(``values``) against what the JVM writes (json4s, ``java.util.Date``, ``Double.toString``),
and messages no one should send: never an exception.
"""

from __future__ import annotations

import struct
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagster_eventhub_ingest.resources.amqp.framing import transfer_header
from dagster_eventhub_ingest.resources.eventhubs_source.events import ArrowBuilder, ColumnRows
from dagster_eventhub_ingest.resources.eventhubs_source.message import decode_event
from dagster_eventhub_ingest.resources.eventhubs_source.schema import source_arrow_schema
from dagster_eventhub_ingest.resources.eventhubs_source.values import (
    java_date,
    java_double,
    json_string,
    text_of,
)
from tests.support import amqp_corpus as c
from tests.support.amqp_corpus import CORPUS, Golden, delivered

SCHEMA = source_arrow_schema()
CHANNEL, HANDLE = 5, 1
ENQUEUED_MS = 1_700_000_000_777


def _frame(payload: bytes, delivery_id: int = 0) -> bytes:
    return transfer_header(CHANNEL, HANDLE, delivery_id, len(payload), False) + payload


def python_rows(payloads: list[bytes]) -> list[dict[str, Any]]:
    builder = ArrowBuilder("3", SCHEMA)
    for payload in payloads:
        event = decode_event(payload)
        builder.add_event(event, event.seq)
    return builder.flush().to_pylist()


def native_rows(native: Any, payloads: list[bytes]) -> list[dict[str, Any]] | None:
    """The rows the native step makes of ``payloads`` in one run, or None if it leaves any."""
    buf = bytearray(b"".join(_frame(p, i) for i, p in enumerate(payloads)))
    got = native.scan(buf, 0, len(buf), CHANNEL, HANDLE, 10_000, set())
    if got is None or got[0] != len(payloads):
        return None
    builder = ArrowBuilder("3", SCHEMA)
    builder.add_rows(ColumnRows(got[5]))
    return builder.flush().to_pylist()


def golden_row(golden: Golden, seq: int, offset: int) -> dict[str, Any]:
    return {
        **golden.row(),
        "partition": "3",
        "offset": str(offset),
        "sequenceNumber": seq,
        "enqueuedTime": datetime.fromtimestamp(ENQUEUED_MS / 1000, timezone.utc),
    }


def assert_rows(got: dict[str, Any], want: dict[str, Any], name: str) -> None:
    """Field by field, naming the first field that differs."""
    assert set(got) == set(want), name
    for key in want:
        assert got[key] == want[key], f"{name}: {key}"


@pytest.mark.parametrize("golden", CORPUS, ids=lambda g: g.name)
def test_each_golden_event_reads_as_the_connector_reads_it_on_both_paths(
    native: Any, golden: Golden
) -> None:
    payload = delivered(golden.message, 41, 4100, ENQUEUED_MS)
    want = golden_row(golden, 41, 4100)
    (row,) = python_rows([payload])
    assert_rows(row, want, f"{golden.name} (Python)")
    taken = native_rows(native, [payload])
    if taken is not None:
        assert_rows(taken[0], want, f"{golden.name} (native)")


#: The goldens the native step must take itself (the events Event Hubs usually carries).
NATIVE_TAKES = {
    "plain",
    "empty body",
    "every byte",
    "several data sections",
    "message properties",
    "partition key and publisher",
    "an IoT Hub event",
}


def test_the_native_step_takes_the_usual_events_and_the_whole_corpus_reads_the_same(
    native: Any,
) -> None:
    """All golden events back to back: native runs where it takes them, Python where it
    leaves them, one by one in order; the rows are the golden rows either way."""
    payloads = [delivered(g.message, i, 100 * i, ENQUEUED_MS) for i, g in enumerate(CORPUS)]
    for golden, payload in zip(CORPUS, payloads, strict=True):
        if golden.name in NATIVE_TAKES:
            assert native_rows(native, [payload]) is not None, golden.name
    rows: list[dict[str, Any]] = []
    buf = bytearray(b"".join(_frame(p, i) for i, p in enumerate(payloads)))
    at, index = 0, 0
    while index < len(payloads):
        got = native.scan(buf, at, len(buf), CHANNEL, HANDLE, 10_000, set())
        if got is None:  # the Python path takes this one
            rows += python_rows([payloads[index]])
            at += len(_frame(payloads[index]))
            index += 1
            continue
        builder = ArrowBuilder("3", SCHEMA)
        builder.add_rows(ColumnRows(got[5]))
        rows += builder.flush().to_pylist()
        index += got[0]
        at = got[1]
    for i, (golden, row) in enumerate(zip(CORPUS, rows, strict=True)):
        assert_rows(row, golden_row(golden, i, 100 * i), golden.name)


def test_the_sdk_encodes_the_goldens_it_sends_as_the_corpus_says() -> None:
    """The SDK-built goldens are what the Python SDK puts on the wire (its own encoder)."""
    sdk_built = [g for g in CORPUS if g.sdk is not None]
    assert len(sdk_built) >= 10
    for golden in sdk_built:
        message = golden.message
        assert message[:2] == b"\x00\x53", golden.name


# -- the texts ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.1, "0.1"),
        (1.5, "1.5"),
        (100.0, "100.0"),
        (1e20, "1.0E20"),
        (1e-7, "1.0E-7"),
        (1e7, "1.0E7"),
        (9999999.999, "9999999.999"),
        (0.001, "0.001"),
        (0.00099, "9.9E-4"),
        (123456.789, "123456.789"),
        (-1 / 3, "-0.3333333333333333"),
        (1e16, "1.0E16"),
        (12345678.9, "1.23456789E7"),
        (1.7976931348623157e308, "1.7976931348623157E308"),
        (2.2250738585072014e-308, "2.2250738585072014E-308"),
        (5e-324, "4.9E-324"),  # Java 19+: the two digits closest to the value
        (1e-323, "9.9E-324"),
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (struct.unpack(">f", struct.pack(">f", 0.1))[0], "0.10000000149011612"),
        (float("nan"), '"NaN"'),
        (float("inf"), '"Infinity"'),
        (float("-inf"), '"-Infinity"'),
    ],
)
def test_doubles_are_written_as_java_writes_them(value: float, text: str) -> None:
    assert java_double(value) == text


@pytest.mark.parametrize(
    ("ms", "text"),
    [  # java.util.Date through json4s's DefaultFormats, on a JVM
        (0, "1970-01-01T00:00:00.000Z"),
        (-1, "1969-12-31T23:59:59.999Z"),
        (1_700_000_000_123, "2023-11-14T22:13:20.123Z"),
        (-12_219_292_800_000, "1582-10-15T00:00:00.000Z"),
        (-12_219_292_800_001, "1582-10-04T23:59:59.999Z"),
        (-62_135_596_800_000, "0001-01-03T00:00:00.000Z"),
        (-62_135_769_600_000, "0001-01-01T00:00:00.000Z"),
        (-62_198_755_200_000, "0002-01-03T00:00:00.000Z"),
        (-99_999_999_999_999, "1200-02-26T14:13:20.001Z"),
        (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
        (253_402_300_800_000, "10000-01-01T00:00:00.000Z"),
        (2**63 - 1, "292278994-08-17T07:12:55.807Z"),
        (-(2**63), "292269055-12-02T16:47:04.192Z"),
    ],
)
def test_timestamps_are_written_as_json4s_writes_a_java_date(ms: int, text: str) -> None:
    assert java_date(ms) == text


def test_strings_in_json_are_escaped_as_jackson_escapes_them() -> None:
    assert (
        json_string('a"b\\c/d\b\f\n\r\t\x00\x1f\x7f\u2028\U0001f600')
        == '"a\\"b\\\\c/d\\b\\f\\n\\r\\t\\u0000\\u001F\x7f\u2028\U0001f600"'
    )


def test_values_the_sdk_decoded_are_written_alike_where_their_type_is_known() -> None:
    """The SDK's public receive path (``text_of``): bytes that are UTF-8 read as text."""
    assert text_of(True) == "true" and text_of(None) == "null"
    assert text_of(1e20) == "1.0E20" and text_of(b"\x00\xff") == "[0,-1]"
    assert text_of(b"text") == "text" and text_of(uuid.UUID(int=1)).endswith("-000000000001")
    assert text_of([1, b"a", {b"k": None}]) == '[1,"a",{"k":null}]'


# -- messages no one should send ----------------------------------------------------------------


def test_a_message_that_is_not_amqp_is_kept_whole_and_never_raises() -> None:
    payload = delivered(c.props(("k", c.string("v"))) + c.data(b"body"), 5)
    for cut in range(1, len(payload)):
        event = decode_event(payload[:cut])
        if event.problem is not None:
            assert event.amqp_body == payload[:cut]
    broken = payload[:-6] + b"\xff" + payload[-5:]
    event = decode_event(broken)
    assert event.seq == 5 and event.problem is not None and event.amqp_body == broken
    assert event.unusual is not None and "amqpBody" in event.unusual


@pytest.mark.parametrize(
    ("ms", "kept"),
    [
        (253_402_300_799_999, True),  # 9999-12-31T23:59:59.999Z: the last time a row holds
        (-62_135_596_800_000, True),  # 0001-01-01T00:00:00Z: the first
        (253_402_300_800_000, False),  # year 10000: fits Arrow's 64-bit microseconds, not Spark
        (-62_135_596_800_001, False),
        (2**62, False),  # microseconds would not fit 64 bits
    ],
)
def test_an_enqueued_time_no_timestamp_can_hold_leaves_the_column_null(
    native: Any, ms: int, kept: bool
) -> None:
    """A damaged frame's time never becomes a value that fails whoever converts the row (a
    Python datetime, Spark's collect, the write's statistics); both paths agree."""
    payload = delivered(c.data(b"x"), 7, enqueued_ms=ms)
    (row,) = python_rows([payload])
    assert row["sequenceNumber"] == 7 and row["body"] == b"x"
    if kept:
        assert row["enqueuedTime"] == datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(
            milliseconds=ms
        )
    else:
        assert row["enqueuedTime"] is None
    assert native_rows(native, [payload]) in (None, [row])


# -- any value, both paths ----------------------------------------------------------------------


_scalars = st.one_of(
    st.just(c.null()),
    st.booleans().map(c.boolean),
    st.integers(0, 255).map(c.ubyte),
    st.integers(-128, 127).map(c.byte),
    st.integers(0, 2**16 - 1).map(c.ushort),
    st.integers(-(2**15), 2**15 - 1).map(c.short),
    st.integers(0, 2**32 - 1).map(c.uint),
    st.integers(-(2**31), 2**31 - 1).map(c.int_),
    st.integers(0, 2**64 - 1).map(c.ulong),
    st.integers(-(2**63), 2**63 - 1).map(c.long),
    st.floats(width=32).map(c.float_),
    st.floats().map(c.double),
    st.integers(-(2**31), 2**31 - 1).map(c.decimal32),
    st.integers(-(2**63), 2**63 - 1).map(c.decimal64),
    st.binary(min_size=16, max_size=16).map(c.decimal128),
    st.integers(0, 0x11_0000).map(c.char),
    st.integers(-(2**63), 2**63 - 1).map(c.timestamp),
    st.integers(-12_219_292_800_000, 2**45).map(c.timestamp),
    st.uuids().map(c.uuid_),
    st.binary(max_size=300).map(c.binary),
    st.text(max_size=300).map(c.string),
    st.binary(max_size=8).map(c.string),  # not always UTF-8
    st.text(st.characters(max_codepoint=127), max_size=12).map(c.symbol),
)
_arrays = st.one_of(
    st.lists(st.integers(-(2**31), 2**31 - 1), max_size=4).map(
        lambda xs: c.array(b"\x71", *(struct.pack(">i", x) for x in xs))
    ),
    st.lists(st.text(st.characters(max_codepoint=127), max_size=5), max_size=4).map(
        lambda xs: c.array(b"\xa3", *(bytes((len(x),)) + x.encode() for x in xs))
    ),
)
_values = st.recursive(
    st.one_of(_scalars, _arrays),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda xs: c.list_(*xs)),
        st.lists(st.tuples(inner, inner), max_size=3).map(lambda ps: c.map_(*ps)),
        st.tuples(_scalars, inner).map(lambda t: c.described(*t)),
    ),
    max_leaves=8,
)
#: Mostly what the native step takes, sometimes what it leaves to Python.
_mostly_scalars = st.one_of(_scalars, _scalars, _scalars, _values)
_keys = st.one_of(
    st.text(max_size=12).map(c.string),
    st.text(max_size=12).map(c.string),
    st.text(max_size=12).map(c.string),
    st.sampled_from([c.null(), c.long(7), c.binary(b"k"), c.symbol("s"), c.boolean(True)]),
)


@st.composite
def _messages(draw: Any) -> bytes:
    seq = draw(st.integers(0, 2**40))
    pairs = [
        ("x-opt-sequence-number", c.long(seq)),
        ("x-opt-offset", c.string(str(seq))),
        ("x-opt-enqueued-time", draw(st.sampled_from([c.timestamp(1), c.null(), c.long(-3)]))),
    ]
    for name in draw(st.lists(st.sampled_from(["x-opt-partition-key", "x-opt-publisher"]))):
        pairs.append((name, draw(st.one_of(st.just(c.null()), st.text(max_size=9).map(c.string)))))
    extra = draw(
        st.lists(
            st.tuples(st.text(st.characters(max_codepoint=127), max_size=8), _values), max_size=3
        )
    )
    out = c.annotations(*pairs, *extra)
    if draw(st.booleans()):
        fields = draw(st.lists(st.one_of(st.just(c.null()), _scalars), max_size=13))
        out += c.section(0x73, c.list_(*fields))
    app = draw(st.lists(st.tuples(_keys, _mostly_scalars), max_size=5))
    if app:
        out += c.application_properties(*app)
    for part in draw(st.lists(st.binary(max_size=40), min_size=1, max_size=3)):
        out += c.data(part)
    return out


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_messages(), min_size=1, max_size=4))
def test_any_message_reads_the_same_on_both_paths(native: Any, messages: list[bytes]) -> None:
    """What the native step takes of any message equals what the Python path makes of it."""
    buf = bytearray(b"".join(_frame(m, i) for i, m in enumerate(messages)))
    got = native.scan(buf, 0, len(buf), CHANNEL, HANDLE, 10_000, set())
    expected = python_rows(messages)
    if got is None:
        return
    builder = ArrowBuilder("3", SCHEMA)
    builder.add_rows(ColumnRows(got[5]))
    assert builder.flush().to_pylist() == expected[: got[0]]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_messages(), st.data())
def test_mutated_messages_never_raise_and_stay_equal_where_native(
    native: Any, message: bytes, data: Any
) -> None:
    mutated = bytearray(message)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(mutated) - 1))
        mutated[at] = data.draw(st.sampled_from([0x00, 0x40, 0x45, 0x53, 0x72, 0xA1, 0xC1, 0xFF]))
    event = decode_event(bytes(mutated))  # never raises
    if event.problem is not None:
        assert event.amqp_body == bytes(mutated)
    test_any_message_reads_the_same_on_both_paths.hypothesis.inner_test(native, [bytes(mutated)])
