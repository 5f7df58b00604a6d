"""The fast pull's pyamqp cuts (resources/spark_source/_amqp.py): the decoder returns exactly what
pyamqp's ``decode_payload`` returns (or raises) for every input, the buffered socket reads like
the socket it wraps, and ``read_range`` installs both over plain TCP, TLS and a reconnect."""

from __future__ import annotations

import contextlib
import decimal
import math
import socket
import ssl
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
from azure.eventhub._pyamqp import _decode as sdk
from azure.eventhub._pyamqp import receiver
from azure.eventhub._pyamqp._encode import encode_payload
from azure.eventhub._pyamqp._transport import SSLTransport, WebSocketTransport
from azure.eventhub._pyamqp.message import Header, Message, Properties
from azure.eventhub._pyamqp.types import TYPE, VALUE, AMQPTypes
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from dagster_eventhub_ingest.resources.spark_source import PartitionRange, _amqp, read_range
from dagster_eventhub_ingest.resources.spark_source._receiver import partition_pull_available

_amqp._bind()  # the fast path's pyamqp names, which decode_payload binds on its first call


@pytest.fixture(autouse=True)
def python_path_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """These tests prove the Python path (what the native step leaves to it, and what runs on a
    host that cannot build it); tests/test_native_columns.py proves the native step equal to it."""
    from dagster_eventhub_ingest.resources.spark_source import _native

    monkeypatch.setenv(_native.NATIVE_ENV, "0")
    _native.reset_for_tests()
    yield
    _native.reset_for_tests()


# -- the decoder: strict equality -----------------------------------------------------------------


def event_fields(event: Any) -> tuple[Any, ...]:
    """Every field of a decoded event (``_message.Event``)."""
    return tuple(getattr(event, name) for name in type(event).__slots__)


def same(a: Any, b: Any) -> bool:
    """Equal values of identical types, all the way down (True is not 1, NaN is NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack(">d", a) == struct.pack(">d", b)
    if isinstance(a, decimal.Decimal):
        return str(a) == str(b)
    if isinstance(a, dict):
        return len(a) == len(b) and all(
            same(ka, kb) and same(va, vb)
            for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True)
        )
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def test_same_is_strict() -> None:
    """The helper above: NaN equals NaN, 0.0 is not -0.0, True is not 1."""
    assert same(math.nan, math.nan) and not same(0.0, -0.0) and not same(True, 1)
    assert same({b"k": [uuid.UUID(int=1)]}, {b"k": [uuid.UUID(int=1)]})


class HugeCount(Exception):
    """pyamqp was about to allocate more list slots than its input has bytes."""


@contextlib.contextmanager
def huge_counts_refused() -> Iterator[None]:
    """pyamqp allocates ``[None] * count`` for a list32 or array32 before reading an element:
    garbage can ask it for gigabytes. While this is on, such a count raises HugeCount instead
    (the fast path leaves those inputs to pyamqp, so ours raises it too) and the example is
    dropped; every other input reaches pyamqp's own functions unchanged."""
    table = sdk._DECODE_BY_CONSTRUCTOR
    originals = table[0xD0], table[0xF0]

    def guarded(decode: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def check(buffer: Any) -> Any:
            if len(buffer) >= 8 and struct.unpack(">I", buffer[4:8])[0] > len(buffer):
                raise HugeCount
            return decode(buffer)

        return check

    table[0xD0], table[0xF0] = guarded(originals[0]), guarded(originals[1])
    try:
        yield
    finally:
        table[0xD0], table[0xF0] = originals


def outcome(decode: Callable[[Any], Any], payload: bytes) -> tuple[Any, ...]:
    """What ``decode`` makes of ``payload`` as the receiver link passes it (a memoryview)."""
    try:
        with huge_counts_refused():
            return ("returned", decode(memoryview(bytearray(payload))))
    except HugeCount:
        reject()
        raise
    except Exception as exc:
        return ("raised", type(exc), str(exc))


def assert_equivalent(payload: bytes) -> None:
    ours, theirs = outcome(_amqp.decode_payload, payload), outcome(sdk.decode_payload, payload)
    assert same(ours, theirs), (payload.hex(), ours, theirs)


def assert_fast_path_equal(payload: bytes) -> None:
    """pyamqp decodes it, and the fast path itself (no fallback) returns the same message."""
    expected = sdk.decode_payload(memoryview(payload))
    assert same(_amqp._decode(bytes(payload)), expected)
    sliced = memoryview(b"\x00\x01\x02" + payload + b"\x03")[3:-1]  # as a frame's payload slice
    assert same(_amqp.decode_payload(sliced), expected)
    assert same(_amqp.decode_payload(memoryview(bytearray(payload))), expected)


# -- messages from pyamqp's own encoder -----------------------------------------------------------


def typed(kind: str, values: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return values.map(lambda v: {TYPE: kind, VALUE: v})


SCALAR_KINDS: dict[str, st.SearchStrategy[Any]] = {
    AMQPTypes.null: st.none(),
    AMQPTypes.boolean: st.booleans(),
    AMQPTypes.ubyte: st.integers(0, 2**8 - 1),
    AMQPTypes.byte: st.integers(-(2**7), 2**7 - 1),
    AMQPTypes.ushort: st.integers(0, 2**16 - 1),
    AMQPTypes.short: st.integers(-(2**15), 2**15 - 1),
    AMQPTypes.uint: st.integers(0, 2**32 - 1),
    AMQPTypes.int: st.integers(-(2**31), 2**31 - 1),
    AMQPTypes.ulong: st.integers(0, 2**64 - 1),
    AMQPTypes.long: st.integers(-(2**63), 2**63 - 1),
    AMQPTypes.float: st.floats(width=32),
    AMQPTypes.double: st.floats(),
    AMQPTypes.timestamp: st.integers(-(2**63), 2**63 - 1),
    AMQPTypes.uuid: st.uuids(),
    AMQPTypes.binary: st.binary(max_size=300),  # <= 255 bytes: vbin8; longer: vbin32
    AMQPTypes.string: st.text(max_size=300),
    AMQPTypes.symbol: st.binary(max_size=300),
}
scalars = st.one_of(*(typed(kind, values) for kind, values in SCALAR_KINDS.items()))


def arrays_of(kinds: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.sampled_from(kinds).flatmap(
        lambda kind: typed(AMQPTypes.array, st.lists(typed(kind, SCALAR_KINDS[kind]), max_size=6))
    )


# Array elements share one constructor (the first element's). pyamqp's encoder writes a null
# array's first element only, and a 0 in a uint or ulong array as uint0/ulong0 (one byte where
# the array's other elements have 4 or 8): both decode misaligned; quirky_values below has them.
_QUIRKY = {AMQPTypes.null, AMQPTypes.uint, AMQPTypes.ulong}
array_of_scalars = arrays_of([k for k in SCALAR_KINDS if k not in _QUIRKY])
descriptors = st.one_of(
    typed(AMQPTypes.ulong, st.integers(33, 41)),  # 35..39 are pyamqp's delivery states
    typed(AMQPTypes.symbol, st.binary(max_size=20)),
)


def compound(
    inner: st.SearchStrategy[Any], keys: st.SearchStrategy[Any] = scalars
) -> st.SearchStrategy[Any]:
    """Lists, maps (keys that decode to something hashable), described values and arrays."""
    return st.one_of(
        typed(AMQPTypes.list, st.lists(inner, max_size=5)),
        typed(AMQPTypes.map, st.lists(st.tuples(keys, inner), max_size=4)),
        typed(AMQPTypes.described, st.tuples(descriptors, inner)),
        typed(AMQPTypes.array, st.lists(typed(AMQPTypes.list, st.lists(inner, max_size=3)))),
        array_of_scalars,
    )


values = st.recursive(scalars, compound, max_leaves=12)
quirky_values = st.recursive(
    st.one_of(scalars, arrays_of(sorted(_QUIRKY))),
    # and map keys that decode to lists (pyamqp raises TypeError: unhashable)
    lambda inner: st.one_of(compound(inner, inner), arrays_of(sorted(_QUIRKY))),
    max_leaves=12,
)
message_ids = st.one_of(
    st.none(), st.integers(0, 2**64 - 1), st.uuids(), st.binary(max_size=40), st.text(max_size=40)
)
optional_text = st.one_of(st.none(), st.text(max_size=40))
optional_ms = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))
headers = st.builds(
    Header,
    durable=st.one_of(st.none(), st.booleans()),
    priority=st.one_of(st.none(), st.integers(0, 255)),
    ttl=st.one_of(st.none(), st.integers(0, 2**32 - 1)),
    first_acquirer=st.one_of(st.none(), st.booleans()),
    delivery_count=st.one_of(st.none(), st.integers(0, 2**32 - 1)),
)
properties = st.builds(
    Properties,
    message_id=message_ids,
    user_id=st.one_of(st.none(), st.binary(max_size=40)),
    to=optional_text,
    subject=optional_text,
    reply_to=optional_text,
    correlation_id=message_ids,
    content_type=st.one_of(st.none(), st.binary(max_size=30)),
    content_encoding=st.one_of(st.none(), st.binary(max_size=30)),
    absolute_expiry_time=optional_ms,
    creation_time=optional_ms,
    group_id=optional_text,
    group_sequence=st.one_of(st.none(), st.integers(0, 2**32 - 1)),
    reply_to_group_id=optional_text,
)
# Application properties as the brief names them: str/int/long/bool/float/double/null/uuid/
# binary values, and lists, maps and arrays (which the encoder does not refuse either).
app_values = st.one_of(
    st.text(max_size=300),
    typed(AMQPTypes.int, SCALAR_KINDS[AMQPTypes.int]),
    typed(AMQPTypes.long, SCALAR_KINDS[AMQPTypes.long]),
    st.booleans(),
    typed(AMQPTypes.float, SCALAR_KINDS[AMQPTypes.float]),
    st.floats(),
    st.none(),
    st.uuids(),
    st.binary(max_size=300),
    typed(AMQPTypes.list, st.lists(scalars, max_size=4)),
    typed(AMQPTypes.map, st.lists(st.tuples(scalars, scalars), max_size=3)),
    array_of_scalars,
)


def messages_of(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Message]:
    annotations = st.dictionaries(
        st.one_of(st.binary(max_size=30), st.integers(0, 2**64 - 1)), values, max_size=5
    )
    return st.builds(
        Message,
        header=st.one_of(st.none(), headers),
        delivery_annotations=st.one_of(st.none(), annotations),
        message_annotations=st.one_of(st.none(), annotations),
        properties=st.one_of(st.none(), properties),
        application_properties=st.one_of(
            st.none(), st.dictionaries(st.text(max_size=30), app_values, max_size=5)
        ),
        data=st.one_of(st.none(), st.lists(st.binary(max_size=400), max_size=3)),
        sequence=st.one_of(st.none(), st.lists(st.lists(values, max_size=4), max_size=2)),
        # pyamqp encodes an amqp-value by the Python type (a typed dict would become a map).
        value=st.one_of(
            st.none(),
            st.lists(values, max_size=4),
            st.text(max_size=300),
            st.binary(max_size=300),
            st.booleans(),
            st.floats(),
            st.uuids(),
            st.integers(-(2**31), 2**31 - 1),
            st.dictionaries(st.text(max_size=10), values, max_size=3),
        ),
        footer=st.one_of(st.none(), annotations),
    )


messages = messages_of(values)
quirky_messages = messages_of(quirky_values)


def encoded(message: Message) -> bytes:
    try:
        return bytes(encode_payload(bytearray(), message))
    except (ValueError, TypeError, struct.error, OverflowError):
        reject()  # a combination pyamqp's encoder refuses (e.g. a float too large for 32 bits)
        raise AssertionError("unreachable") from None


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages)
def test_decoder_equals_pyamqps_on_every_encoded_message(message: Message) -> None:
    assert_fast_path_equal(encoded(message))


def test_decoder_on_the_usual_event_and_edge_bodies() -> None:
    usual: dict[str | bytes, Any] = {
        b"x-opt-sequence-number": 5,
        b"x-opt-offset": "5597",
        b"x-opt-enqueued-time": 17,
    }
    for data in ([b"x" * 1024], [b""], [b"a", b"b" * 255, b"c" * 256], [b"d" * 70_000]):
        assert_fast_path_equal(encoded(Message(message_annotations=usual, data=data)))
    assert _amqp.decode_payload(memoryview(b"")) == sdk.decode_payload(memoryview(b"")) == Message()


# -- truncated, mutated and raw payloads ----------------------------------------------------------


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(quirky_messages)
def test_decoder_equals_pyamqps_on_what_pyamqps_encoder_misencodes(message: Message) -> None:
    assert_equivalent(encoded(message))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages, st.data())
def test_decoder_equals_pyamqps_on_truncated_messages(message: Message, data: Any) -> None:
    payload = encoded(message)
    cuts = data.draw(st.lists(st.integers(0, max(0, len(payload) - 1)), max_size=12))
    for cut in {*cuts, len(payload) - 1, len(payload) // 2, 1, 2, 3, 4}:
        if 0 <= cut < len(payload):
            assert_equivalent(payload[:cut])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages, st.data())
def test_decoder_equals_pyamqps_on_mutated_messages(message: Message, data: Any) -> None:
    """Wrong lengths, counts and constructors: a few bytes of a real message overwritten."""
    payload = bytearray(encoded(message))
    if not payload:
        reject()
    for _ in range(data.draw(st.integers(1, 4))):
        payload[data.draw(st.integers(0, len(payload) - 1))] = data.draw(st.integers(0, 255))
    assert_equivalent(bytes(payload))


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_decoder_equals_pyamqps_on_garbage(payload: bytes) -> None:
    assert_equivalent(payload)
    assert_equivalent(b"\x00\x53\x75" + payload)  # a data section of garbage
    assert_equivalent(b"\x00\x53\x72" + payload)  # message annotations of garbage


# Every constructor, hand-encoded (some pyamqp's encoder never writes: uint0, ulong0, smalluint,
# ubyte, list0, str32/sym32, map32 with few entries, described values inside arrays...).
_FIXED = {0x40: 0, 0x41: 0, 0x42: 0, 0x43: 0, 0x44: 0, 0x45: 0, 0x50: 1, 0x51: 1, 0x52: 1}
_FIXED |= {0x53: 1, 0x54: 1, 0x55: 1, 0x56: 1, 0x60: 2, 0x61: 2, 0x70: 4, 0x71: 4, 0x72: 4}
_FIXED |= {0x80: 8, 0x81: 8, 0x82: 8, 0x83: 8, 0x98: 16, 0x94: 16}
_VARIABLE = {0xA0: 1, 0xA1: 1, 0xA3: 1, 0xB0: 4, 0xB1: 4, 0xB3: 4}
_UNKNOWN = [0x73, 0x74, 0x84, 0x01, 0x3F, 0xFF]  # char, decimal32/64 and codes pyamqp lacks


def _width(code: int, count: int) -> bytes:
    return bytes([count]) if code in (0xA0, 0xA1, 0xA3, 0xC0, 0xC1, 0xE0) else count.to_bytes(4)


_SUBS = [*_FIXED, *_VARIABLE, 0xC0, 0x00]


def raw_body(
    code: int, draw: Any, inner: st.SearchStrategy[bytes], subs: list[int] = _SUBS
) -> bytes:
    """The encoding after constructor ``code`` (also an array element's), laid out as pyamqp
    reads it, so that every count it reads is the one written."""
    if code in _FIXED:
        return draw(st.binary(min_size=_FIXED[code], max_size=_FIXED[code]))
    if code in _VARIABLE:
        data = draw(st.binary(max_size=40))
        return _width(code, len(data)) + data
    if code in (0xC0, 0xD0, 0xC1, 0xD1):
        items = draw(st.lists(inner, max_size=4))
        if code in (0xC1, 0xD1) and len(items) % 2:
            items.append(b"\x40")
        content = _width(code, len(items)) + b"".join(items)
        return _width(code, len(content)) + content
    if code in (0xE0, 0xF0):
        sub = draw(st.sampled_from(subs))
        if sub == 0x00:  # described elements: pyamqp reads each as descriptor + value
            elements = [draw(inner) + draw(inner) for _ in range(draw(st.integers(0, 3)))]
        else:
            elements = [raw_body(sub, draw, inner, subs) for _ in range(draw(st.integers(0, 3)))]
        # pyamqp reads no element constructor after a count of 0 (nor does its encoder write one)
        head = bytes([sub]) if elements else b""
        content = _width(code, len(elements)) + head + b"".join(elements)
        return _width(code, len(content)) + content
    if code == 0x00:
        return draw(inner) + draw(inner)
    return draw(st.binary(max_size=4))


@st.composite
def raw_value(draw: Any, inner: st.SearchStrategy[bytes] | None = None) -> bytes:
    codes = [*_FIXED, *_VARIABLE, *_UNKNOWN]
    if inner is not None:
        codes += [0xC0, 0xD0, 0xC1, 0xD1, 0xE0, 0xF0, 0x00]
    code = draw(st.sampled_from(codes))
    return bytes([code]) + raw_body(code, draw, st.just(b"\x40") if inner is None else inner)


raw_values = st.recursive(raw_value(), raw_value, max_leaves=10)
raw_sections = st.tuples(
    st.sampled_from([b"\x00\x53", b"\x00\x53", b"\x00\x80", b"\x01\x53"]),
    st.sampled_from([*range(0x70, 0x79), 0x00, 0x7F]),
    raw_values,
).map(lambda t: t[0] + bytes([t[1]]) + t[2])


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(raw_sections, min_size=1, max_size=4).map(b"".join), st.data())
def test_decoder_equals_pyamqps_on_raw_sections(payload: bytes, data: Any) -> None:
    assert_equivalent(payload)
    assert_equivalent(payload[: data.draw(st.integers(0, len(payload)))])


@pytest.mark.parametrize("code", sorted({*_FIXED, *_VARIABLE, 0xC0, 0xC1, 0xD0, 0xD1, 0xE0, 0xF0}))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_every_constructor_of_pyamqp_is_decoded_the_same(code: int, data: Any) -> None:
    known = st.sampled_from([b"\x40", b"\x41", b"\x52\x07", b"\xa1\x02hi"])
    # Array elements the fast path decodes itself: not decimals, nor (array32) zero-width ones,
    # which may outnumber the bytes (tests below and above give both to pyamqp).
    subs = [c for c in _SUBS if c != 0x94 and (code != 0xF0 or _FIXED.get(c) != 0)]
    body = raw_body(code, data.draw, known, subs)
    payload = b"\x00\x53\x77" + bytes([code]) + body  # an amqp-value section
    if code == 0x94:  # decimal128: pyamqp's own (the fast path falls back)
        with pytest.raises(_amqp._Unhandled):
            _amqp._decode(payload)
        assert_equivalent(payload)
    else:
        assert_fast_path_equal(payload)


def test_the_constructors_are_those_of_pyamqps_table() -> None:
    """A constructor pyamqp adds or drops changes this set (and the source digest below)."""
    table = {code for code, fn in enumerate(sdk._DECODE_BY_CONSTRUCTOR) if fn is not None}
    assert table == {*_FIXED, *_VARIABLE, 0x00, 0xC0, 0xC1, 0xD0, 0xD1, 0xE0, 0xF0}


@pytest.mark.parametrize("code", _UNKNOWN)
def test_unknown_constructors_raise_what_pyamqp_raises(code: int) -> None:
    payload = b"\x00\x53\x77" + bytes([code]) + b"\x00" * 16
    with pytest.raises(TypeError):
        sdk.decode_payload(memoryview(payload))
    assert_equivalent(payload)


def test_decimals_are_pyamqps() -> None:
    for value in ("1.5", "-0.000123", "12345678901234567890", "0"):
        message = Message(value={TYPE: AMQPTypes.decimal128, VALUE: decimal.Decimal(value)})
        assert_equivalent(encoded(message))


def test_huge_counts_are_left_to_pyamqp(monkeypatch: pytest.MonkeyPatch) -> None:
    """A count no input could hold is pyamqp's to handle (the fast path allocates nothing)."""
    calls: list[Any] = []
    _amqp._bind()

    def sdk_decode(b: Any) -> str:
        calls.append(b)
        return "pyamqp's"

    monkeypatch.setattr(_amqp, "_sdk_decode_payload", sdk_decode)
    big_list = b"\x00\x53\x77\xd0\x00\x00\x00\x08\x7f\xff\xff\xff"
    big_array = b"\x00\x53\x77\xf0\x00\x00\x00\x08\x7f\xff\xff\xff\x40"
    for payload in (big_list, big_array):
        assert _amqp.decode_payload(payload) == "pyamqp's"
    assert len(calls) == 2


def test_the_decoder_is_installed_only_over_the_source_it_was_proven_against() -> None:
    assert _amqp.decoder_source_sha256() == _amqp._DECODER_SOURCE_SHA256, (
        "azure.eventhub._pyamqp._decode changed: the fast decoder stays off until this file "
        "passes against it and _DECODER_SOURCE_SHA256 is updated"
    )
    assert _amqp.sdk_supported() and partition_pull_available()
    assert _amqp.install_decoder() is True
    assert receiver.decode_payload is _amqp.decode_payload
    assert sdk.decode_payload is not _amqp.decode_payload  # pyamqp's own stays the fallback
    assert _amqp._sdk_decode_payload is sdk.decode_payload


# -- the performative decoder: strict equality with pyamqp's decode_frame --------------------------


def frame_outcome(decode: Callable[[Any], Any], payload: bytes) -> tuple[Any, ...]:
    """What ``decode`` makes of a frame's payload as pyamqp's transport passes it (a view).

    pyamqp allocates ``[None] * count`` for a frame's list32 before reading a field: such a
    count past the input (garbage) is dropped, as in :func:`outcome`."""
    if len(payload) >= 12 and payload[3] == 0xD0 and struct.unpack(">i", payload[8:12])[0] > 4096:
        reject()
    return outcome(decode, payload)


def assert_frame_equivalent(payload: bytes) -> None:
    ours = frame_outcome(_amqp.decode_frame, payload)
    theirs = frame_outcome(sdk.decode_frame, payload)
    assert same(ours, theirs), (payload.hex(), ours, theirs)


def assert_frame_fast_path_equal(payload: bytes) -> None:
    """pyamqp decodes it, and the fast path itself (no fallback) returns the same."""
    expected = sdk.decode_frame(memoryview(bytearray(payload)))
    assert same(_amqp._decode_frame(memoryview(bytearray(payload))), expected)
    sliced = memoryview(b"\x00\x01\x02" + payload + b"\x03")[3:-1]  # as the transport's slice
    assert same(_amqp.decode_frame(sliced), expected)


def performative(kind: int, fields: list[bytes], body: bytes = b"", *, wide: bool = False) -> bytes:
    """A frame's payload: the described list of ``fields`` (raw encodings), then ``body``."""
    content = b"".join(fields)
    if wide:
        listed = b"\xd0" + (len(content) + 4).to_bytes(4) + len(fields).to_bytes(4) + content
    else:
        listed = b"\xc0" + bytes([len(content) + 1, len(fields)]) + content
    return b"\x00\x53" + bytes([kind]) + listed + body


def test_the_frame_decoder_on_the_emulators_transfers() -> None:
    """What the emulator sends (resources' tests read through it): every field, the message view."""
    from dagster_eventhub_ingest.resources.amqp.framing import transfer_header

    message = b"\x00\x53\x75\xb0" + (1024).to_bytes(4) + bytes(range(256)) * 4
    for handle, delivery, more in [(0, 0, False), (3, 2**32 - 1, True), (255, 123_456, False)]:
        frame = transfer_header(5, handle, delivery, len(message), more) + message
        assert_frame_fast_path_equal(frame[8:])
        kind, fields = _amqp.decode_frame(memoryview(bytearray(frame[8:])))
        assert kind == 20 and fields[:6] == [handle, delivery, delivery.to_bytes(4), 0, True, more]
        assert type(fields[11]) is memoryview and bytes(fields[11]) == message


def test_the_frame_decoder_on_pyamqps_own_performatives() -> None:
    """Every performative pyamqp's encoder writes, as the service sends them."""
    from azure.eventhub._pyamqp import performatives as p
    from azure.eventhub._pyamqp._encode import encode_frame
    from azure.eventhub._pyamqp.error import AMQPError

    error = AMQPError(condition=b"amqp:link:stolen", description="stolen", info={b"k": b"v"})
    frames = [
        p.OpenFrame("container", "host", 65536, 8191, 60000, None, None, None, None, {b"p": 1}),
        p.BeginFrame(1, 0, 5000, 5000, 255, None, None, None),
        p.AttachFrame(
            "link", 3, True, 1, 0, None, None, None, None, None, 7, None, None, {b"x": 2}
        ),
        p.FlowFrame(10, 5000, 20, 5000, 0, 7, 300, 0, False, False, None),
        p.TransferFrame(
            0, 9, b"tag-0123456789ab", 0, True, False, None, None, None, None, None, b"\x00Sw\x40"
        ),
        p.DispositionFrame(True, 1, 4, True, None, None),
        p.DetachFrame(3, True, error),
        p.EndFrame(None),
        p.CloseFrame(error),
    ]
    for frame in frames:
        _, payload = encode_frame(cast(Any, frame))
        assert payload is not None
        assert_frame_equivalent(bytes(payload))


raw_fields = st.lists(st.one_of(raw_values, st.sampled_from([b"\x40", b"\x41", b"\x42", b"\x43"])))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from([0x10, 0x11, 0x12, 0x13, 0x14, 0x14, 0x15, 0x16, 0x17, 0x18, 0x40, 0x41]),
    raw_fields,
    st.binary(max_size=64),
    st.booleans(),
    st.data(),
)
def test_the_frame_decoder_equals_pyamqps_on_raw_performatives(
    kind: int, fields: list[bytes], body: bytes, wide: bool, data: Any
) -> None:
    """Any fields in a list8 or list32, a message after them; then cut short, then mutated."""
    payload = performative(kind, fields, body, wide=wide)
    assert_frame_equivalent(payload)
    assert_frame_equivalent(payload[: data.draw(st.integers(0, len(payload)))])
    at = data.draw(st.integers(0, len(payload) - 1))
    changed = bytes([data.draw(st.integers(0, 255))])
    assert_frame_equivalent(payload[:at] + changed + payload[at + 1 :])


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_the_frame_decoder_equals_pyamqps_on_garbage(payload: bytes) -> None:
    assert_frame_equivalent(payload)
    assert_frame_equivalent(b"\x00\x53\x14" + payload)


def test_the_frame_decoder_is_installed_with_the_message_decoder() -> None:
    from azure.eventhub._pyamqp import _transport

    assert _amqp.install_decoder() is True
    assert _transport.decode_frame is _amqp.decode_frame
    assert sdk.decode_frame is not _amqp.decode_frame  # pyamqp's own stays the fallback
    assert _amqp._sdk_decode_frame is sdk.decode_frame


# -- the buffered socket --------------------------------------------------------------------------


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def read_exactly(sock: Any, n: int) -> bytes:
    view = memoryview(bytearray(n))
    got = 0
    while got < n:
        step = sock.recv_into(view[got:])
        assert step, "end of stream"
        got += step
    return bytes(view)


def test_reads_are_served_from_the_buffer_without_touching_the_socket(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, b = pair
    buffered = _amqp.BufferedSocket(a, size=64)
    b.sendall(b"0123456789")
    time.sleep(0.05)
    view = memoryview(bytearray(4))
    assert buffered.recv_into(view) == 4 and bytes(view) == b"0123"
    assert buffered.buffered == 6
    a.setblocking(False)  # a real read now would raise BlockingIOError
    assert buffered.recv_into(view, 3) == 3 and bytes(view[:3]) == b"456"
    assert buffered.recv_into(view) == 3 and bytes(view[:3]) == b"789"
    assert buffered.buffered == 0
    with pytest.raises(BlockingIOError):  # empty: the real socket's read, its error
        buffered.recv_into(view)
    with pytest.raises(ValueError):
        buffered.recv_into(view, 5)  # more than the buffer holds, as socket.recv_into


def test_frames_split_across_refills_arrive_whole_and_in_order(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """pyamqp's own frame reader (SSLTransport.read) over a small buffer, frames sent in
    random pieces: every frame whole, in order, whatever the refill boundaries."""
    import random

    a, b = pair
    rnd = random.Random(5)
    frames = []
    for n in range(300):
        body = bytes([n % 251]) * rnd.choice([0, 1, 7, 100, 1000, 5000])
        frames.append((8 + len(body)).to_bytes(4) + b"\x02\x00\x00\x01" + body)
    stream = b"".join(frames)

    def send() -> None:
        i = 0
        while i < len(stream):
            step = rnd.randint(1, 3000)
            b.sendall(stream[i : i + step])
            i += step
            if rnd.random() < 0.05:
                time.sleep(0.01)

    transport = SSLTransport("127.0.0.1:1", use_tls=False)
    transport.sock = _amqp.BufferedSocket(a, size=257)  # type: ignore[assignment]
    a.settimeout(5)
    sender = threading.Thread(target=send)
    sender.start()
    try:
        for n, frame in enumerate(frames):
            header, channel, payload = transport.read()
            assert bytes(header) + bytes(payload) == frame, n
            assert channel == 1
    finally:
        sender.join()
    assert cast(_amqp.BufferedSocket, transport.sock).buffered == 0


def test_a_timeout_with_nothing_buffered_is_the_sockets_and_loses_nothing(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, b = pair
    a.settimeout(0.05)
    buffered = _amqp.BufferedSocket(a)
    view = memoryview(bytearray(8))
    with pytest.raises(socket.timeout):
        buffered.recv_into(view)
    # pyamqp's reader through it: half a frame, a timeout, the rest, one whole frame.
    transport = SSLTransport("127.0.0.1:1", use_tls=False)
    transport.sock = buffered  # type: ignore[assignment]
    frame = (8 + 5).to_bytes(4) + b"\x02\x00\x00\x03" + b"hello"
    b.sendall(frame[:10])
    with pytest.raises(socket.timeout):
        transport.read()
    b.sendall(frame[10:])
    _header, channel, payload = transport.read()
    assert channel == 3 and bytes(payload) == b"hello"


def test_end_of_stream_comes_after_the_buffered_bytes(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, b = pair
    buffered = _amqp.BufferedSocket(a)
    b.sendall(b"abc")
    b.close()
    time.sleep(0.05)
    view = memoryview(bytearray(2))
    assert buffered.recv_into(view) == 2 and bytes(view) == b"ab"
    assert buffered.recv(10) == b"c"
    assert buffered.recv_into(view) == 0
    assert buffered.recv(10) == b""


def test_large_reads_and_flags_go_to_the_socket(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    buffered = _amqp.BufferedSocket(a, size=16)
    b.sendall(b"x" * 40)
    time.sleep(0.05)
    big = memoryview(bytearray(32))
    assert buffered.recv_into(big) == 32 and buffered.buffered == 0  # unbuffered: >= size
    assert buffered.recv_into(memoryview(bytearray(4)), 0, socket.MSG_PEEK) == 4
    assert buffered.recv(2) == b"xx" and buffered.buffered == 6
    with pytest.raises(ValueError, match="flags"):
        buffered.recv_into(memoryview(bytearray(4)), 0, socket.MSG_PEEK)


def test_everything_else_is_the_sockets(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    buffered = _amqp.BufferedSocket(a)
    assert buffered.wrapped is a and buffered.fileno() == a.fileno()
    buffered.settimeout(1.5)
    assert buffered.gettimeout() == a.gettimeout() == 1.5
    buffered.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    assert a.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    assert buffered.send(b"ping") == 4 and b.recv(4) == b"ping"
    assert buffered.family == a.family
    buffered.shutdown(socket.SHUT_RDWR)
    buffered.close()
    assert a.fileno() == -1


def _transport_with(sock: Any) -> SSLTransport:
    transport = SSLTransport("127.0.0.1:1", use_tls=False)
    transport.sock = sock
    return transport


def handler_of(transport: Any) -> Any:
    return SimpleNamespace(_connection=SimpleNamespace(_transport=transport))


def test_buffer_reads_installs_once_per_socket(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    transport = _transport_with(a)
    assert _amqp.buffer_reads(handler_of(transport))
    first = transport.sock
    assert type(first) is _amqp.BufferedSocket and first.wrapped is a
    assert _amqp.buffer_reads(handler_of(transport)) and transport.sock is first
    transport.sock = b  # a reconnect's new socket
    assert _amqp.buffer_reads(handler_of(transport)) and transport.sock.wrapped is b


def _frames(rnd: Any, count: int) -> list[bytes]:
    """Frames as pyamqp reads them: sizes from empty to past the buffer, data offsets 2-4,
    channels (AMQP frames, type 0)."""
    frames = []
    for n in range(count):
        doff = rnd.choice([2, 2, 2, 3, 4])
        body = bytes([n % 251]) * rnd.choice([0, 0, 1, 7, 100, 1000, 5000, 70_000])
        extended = bytes(4 * (doff - 2))
        size = 8 + len(extended) + len(body)
        header = size.to_bytes(4) + bytes([doff, 0])
        frames.append(header + rnd.randrange(65536).to_bytes(2) + extended + body)
    return frames


def _read_all(
    reader: Any, transport: SSLTransport, count: int, verify: int | None
) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    while len(out) < count:
        try:
            header, channel, payload = reader(verify_frame_type=verify)
        except TimeoutError:
            continue
        out.append((type(header), bytes(header), channel, type(payload), bytes(payload or b"")))
    return out


@pytest.mark.parametrize("verify", [0, None])
def test_the_frame_reader_reads_what_pyamqps_read_does(
    verify: int | None, pair: tuple[socket.socket, socket.socket]
) -> None:
    """The same stream, sent in random pieces with pauses (timeouts mid-frame), read by pyamqp's
    read over the plain socket and by the frame reader over the buffered one: the same frames,
    errors and types, in the same order."""
    import random

    rnd = random.Random(11)
    frames = _frames(rnd, 400)
    stream = b"".join(frames)
    results = []
    for fast in (False, True):
        a, b = socket.socketpair()
        a.settimeout(0.02)
        transport = _transport_with(a)
        if fast:
            assert _amqp.buffer_reads(handler_of(transport))
            reader = transport.read
            assert isinstance(reader, _amqp._FrameReader)
        else:
            reader = transport.read
        pieces = random.Random(3)

        def send(b: socket.socket = b, pieces: random.Random = pieces) -> None:
            i = 0
            while i < len(stream):
                step = pieces.randint(1, 9000)
                b.sendall(stream[i : i + step])
                i += step
                if pieces.random() < 0.03:
                    time.sleep(0.05)  # longer than the read timeout: a frame cut by a timeout

        sender = threading.Thread(target=send)
        sender.start()
        try:
            results.append(_read_all(reader, transport, len(frames), verify))
        finally:
            sender.join()
            a.close()
            b.close()
    assert results[0] == results[1]
    # pyamqp skips doff - 2 bytes of the payload (it reads the data offset as bytes past 8, not
    # as 4-byte words); equal to it is what matters, and every frame came through once.
    assert [r[1] + r[4] for r in results[1]] == [f[:8] + f[8 + f[4] - 2 :] for f in frames]


def test_a_frame_type_not_asked_for_is_pyamqps_error() -> None:
    errors = []
    for fast in (False, True):
        a, b = socket.socketpair()
        a.settimeout(1)
        transport = _transport_with(a)
        if fast:
            assert _amqp.buffer_reads(handler_of(transport))
        b.sendall((8 + 3).to_bytes(4) + b"\x02\x01\x00\x05" + b"sas")
        with pytest.raises(ValueError) as err:
            transport.read(verify_frame_type=0)
        errors.append(str(err.value))
        a.close()
        b.close()
    assert errors[0] == errors[1] and "frame type" in errors[0]


def test_the_frame_reader_leaves_the_protocol_header_and_other_calls_to_pyamqp(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, b = pair
    a.settimeout(1)
    transport = _transport_with(a)
    assert _amqp.buffer_reads(handler_of(transport))
    b.sendall(b"AMQP\x00\x01\x00\x00" + (8).to_bytes(4) + b"\x02\x00\x00\x07")
    header, channel, payload = transport.read()
    assert bytes(header) == b"AMQP\x00\x01\x00\x00" and payload is None
    header, channel, payload = transport.read()
    assert channel == 7 and bytes(payload) == b""


def test_buffer_reads_leaves_other_transports_alone(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, _ = pair
    websocket = WebSocketTransport("127.0.0.1:1")
    websocket.sock = cast(Any, a)
    assert not _amqp.buffer_reads(handler_of(websocket)) and websocket.sock is a

    class OwnRead(SSLTransport):
        def _read(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    own = OwnRead("127.0.0.1:1", use_tls=False)
    own.sock = a
    assert not _amqp.buffer_reads(handler_of(own)) and own.sock is a
    assert not _amqp.buffer_reads(handler_of(_transport_with(None)))
    assert not _amqp.buffer_reads(SimpleNamespace(_connection=None))
    busy = _transport_with(a)
    with busy.socket_lock:  # the keep-alive thread mid-read: not now, next time
        assert not _amqp.buffer_reads(handler_of(busy)) and busy.sock is a
    assert _amqp.buffer_reads(handler_of(busy))


# -- read_range over the emulator, plain TCP and TLS ----------------------------------------------


class Spy:
    """Counts what the cuts did during a read: sockets buffered, refills, messages the reader
    decoded from their bytes, pyamqp's own decodes (fallbacks)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sockets: list[_amqp.BufferedSocket] = []
        self.refills = 0
        self.decoded = 0
        self.fallbacks = 0
        self.frames = 0
        self.frame_fallbacks = 0
        self.inline = 0  # transfers _TransferListen took itself
        init = _amqp.BufferedSocket.__init__
        transfers = _amqp._TransferListen._transfers

        def spy_transfers(listen: Any, conn: Any, limit: int) -> int:
            taken = transfers(listen, conn, limit)
            self.inline += taken
            return taken

        monkeypatch.setattr(_amqp._TransferListen, "_transfers", spy_transfers)

        def spy_init(sock: Any, *args: Any, **kwargs: Any) -> None:
            init(sock, *args, **kwargs)
            self.sockets.append(sock)

        monkeypatch.setattr(_amqp.BufferedSocket, "__init__", spy_init)
        _amqp._bind()
        for owner, name, counter in [
            (_amqp.BufferedSocket, "_fill", "refills"),
            (_amqp, "decode_event", "decoded"),
            (_amqp, "_sdk_decode_payload", "fallbacks"),
            (_amqp, "_decode_frame", "frames"),
            (_amqp, "_sdk_decode_frame", "frame_fallbacks"),
        ]:
            monkeypatch.setattr(owner, name, self._counting(getattr(owner, name), counter))

    def _counting(self, fn: Callable[..., Any], counter: str) -> Callable[..., Any]:
        def counted(*args: Any) -> Any:
            setattr(self, counter, getattr(self, counter) + 1)
            return fn(*args)

        return counted


def bodies(count: int) -> list[bytes]:
    """Numbered bodies: mostly 1 KB, some empty, some past a TLS record or the whole buffer."""
    sizes = {7: 0, 100: 20_000, 250: 300_000, 251: 255, 252: 256}
    return [f"{n:06d}".encode() + bytes([n % 256]) * sizes.get(n, 1018) for n in range(count)]


def send_all(producer: Any, items: list[bytes]) -> None:
    from azure.eventhub import EventData

    with producer:
        batch = producer.create_batch(partition_id="0")
        for body in items:
            try:
                batch.add(EventData(body))
            except ValueError:
                producer.send_batch(batch)
                batch = producer.create_batch(partition_id="0")
                batch.add(EventData(body))
        producer.send_batch(batch)


def assert_read_exactly(settings: Any, items: list[bytes], **kwargs: Any) -> list[dict[str, Any]]:
    rng = PartitionRange("0", 0, len(items) - 1)
    rows = [row for batch in read_range(settings, rng, **kwargs) for row in batch.to_pylist()]
    assert [row["sequenceNumber"] for row in rows] == list(range(len(items)))
    assert [row["body"] for row in rows] == items
    return rows


COUNT = 1500


@pytest.mark.integration
def test_read_range_over_plain_tcp_buffers_and_decodes_fast(
    make_eventhub: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = make_eventhub(partitions=1)
    items = bodies(COUNT)
    send_all(hub.producer(), items)
    spy = Spy(monkeypatch)
    assert_read_exactly(hub.settings(), items)
    (buffered,) = spy.sockets
    assert type(buffered.wrapped) is socket.socket
    assert 0 < spy.refills < COUNT  # one refill served many frames
    assert spy.decoded >= COUNT and spy.fallbacks == 0
    assert spy.frames >= COUNT and spy.frame_fallbacks == 0
    assert receiver.decode_payload is _amqp.decode_payload
    # Most transfers taken inline; a listen's first frame, and the 300 KB event's frames (a
    # message in several), went through pyamqp: every event still arrived once, in order.
    assert COUNT // 2 < spy.inline < COUNT


@pytest.mark.integration
def test_read_range_reconnects_onto_a_new_buffered_socket(
    make_eventhub: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection dies mid-range (with frames still buffered): the pull reconnects, the new
    socket is buffered too, and every event arrives once."""
    hub = make_eventhub(partitions=1)
    items = bodies(COUNT)
    send_all(hub.producer(), items)
    spy = Spy(monkeypatch)
    rng = PartitionRange("0", 0, COUNT - 1)
    rows: list[dict[str, Any]] = []
    for batch in read_range(hub.settings(), rng, batch_rows=200, prefetch=100):
        rows += batch.to_pylist()
        if len(spy.sockets) == 1 and len(rows) >= 400:
            spy.sockets[0].wrapped.shutdown(socket.SHUT_RDWR)
    assert [row["sequenceNumber"] for row in rows] == list(range(COUNT))
    assert [row["body"] for row in rows] == items
    # One buffered socket per connection: the first, and the reconnect's (a retry may add one).
    assert len(spy.sockets) >= 2
    assert len({id(s.wrapped) for s in spy.sockets}) == len(spy.sockets)


_NO_PANDAS_READ = """
import pickle, sys
from dagster_eventhub_ingest.resources.spark_source import PartitionRange, read_range
settings, count = pickle.loads(sys.stdin.buffer.read())
batches = list(read_range(settings, PartitionRange("0", 0, count - 1)))
print(sorted(m for m in ("pandas", "pyarrow") if m in sys.modules))  # before to_pylist's imports
rows = [row for batch in batches for row in batch.to_pylist()]
assert [r["sequenceNumber"] for r in rows] == list(range(count)), "not every event was read"
assert [r["properties"] for r in rows[:2]] == [[], [("kind", "test"), ("n", "1")]], rows[:2]
"""


@pytest.mark.integration
def test_a_reader_builds_its_batches_without_importing_pandas(
    make_eventhub: Callable[..., Any],
) -> None:
    """pyarrow's ``pa.array`` imports pandas (~0.26 s and ~44 MB per Spark Python worker); the
    reader's batches, application properties and all, are built without it."""
    import pickle
    import subprocess
    import sys

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
def test_a_batch_ends_at_the_event_that_reaches_its_byte_bound(
    make_eventhub: Callable[..., Any],
) -> None:
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
def test_the_sdk_receive_has_none_of_the_cuts(
    make_eventhub: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EHINGEST_SDK_RECEIVE", "1")
    hub = make_eventhub(partitions=1)
    items = bodies(300)
    send_all(hub.producer(), items)
    spy = Spy(monkeypatch)
    assert_read_exactly(hub.settings(), items)
    assert spy.sockets == []


def tls_hub_with(
    tls_emulator: tuple[Any, str], items: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> Any:
    """A one-partition hub on the TLS-only emulator holding ``items``; the settings to read it
    (every consumer client made in this test dials TLS and trusts the test CA)."""
    from azure.eventhub import EventHubProducerClient

    from dagster_eventhub_ingest.resources.settings import EventHubSettings

    emu, ca = tls_emulator
    assert "UseDevelopmentEmulator" not in emu.connection_string
    # The SDK dials the TLS port of the Endpoint's host only through custom_endpoint_address.
    tls: dict[str, Any] = {
        "connection_verify": ca,
        "custom_endpoint_address": f"sb://127.0.0.1:{emu.port}",
    }
    hub = emu.create_hub(partitions=1)
    send_all(
        EventHubProducerClient.from_connection_string(
            emu.connection_string, eventhub_name=hub.name, **tls
        ),
        items,
    )
    consumer_client = EventHubSettings.consumer_client
    monkeypatch.setattr(
        EventHubSettings, "consumer_client", lambda self, **kw: consumer_client(self, **tls, **kw)
    )
    return EventHubSettings(eventhub_name=hub.name, connection_string=emu.connection_string)


@pytest.mark.integration
def test_read_range_over_tls_buffers_the_ssl_socket(
    tls_emulator: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    items = bodies(COUNT)
    settings = tls_hub_with(tls_emulator, items, monkeypatch)
    spy = Spy(monkeypatch)
    assert_read_exactly(settings, items)
    (buffered,) = spy.sockets
    assert isinstance(buffered.wrapped, ssl.SSLSocket)
    assert 0 < spy.refills < COUNT
    assert spy.decoded >= COUNT and spy.fallbacks == 0


def test_the_transfer_path_is_installed_only_over_the_source_it_was_proven_against() -> None:
    assert _amqp.transfer_source_sha256() == _amqp._TRANSFER_SOURCE_SHA256, (
        "a function a transfer passes through in azure.eventhub changed "
        "(_amqp._transfer_functions): the inline transfers stay off until this file passes "
        "against it and _TRANSFER_SOURCE_SHA256 is updated"
    )
    assert _amqp.transfer_path_proven()


def _session_class() -> Any:
    from azure.eventhub._pyamqp.session import Session

    return Session


def _pull_all(settings: Any, count: int, **kwargs: Any) -> tuple[list[Any], dict[str, Any]]:
    """Every message of ``[0, count)`` through a pull, and its link's and session's state
    once the last one is in (the partition holds no more: no frame arrives after it)."""
    from dagster_eventhub_ingest.resources.spark_source._events import ColumnRows
    from dagster_eventhub_ingest.resources.spark_source._receiver import _PartitionPull

    messages: list[Any] = []
    events = 0  # a native run (ColumnRows) holds many
    pull = _PartitionPull(
        settings, "0", starting_position=0, prefetch=300, wait_seconds=10, end=count - 1, **kwargs
    )
    with pull:
        for batch in pull:
            assert batch, "no event for 10 s"
            messages += batch
            events += sum(m.rows if type(m) is ColumnRows else 1 for m in batch)
            if events >= count:
                handler = pull._consumer._handler
                link, session = handler._link, handler._link._session
                state = {
                    "inline": type(vars(handler._connection).get("listen")).__name__,
                    "link": (
                        link.delivery_count,
                        link.current_link_credit,
                        link.received_delivery_id,
                        len(link._received_delivery_tags),
                        bytes(link._received_payload),
                    ),
                    "session": (
                        session.next_incoming_id,
                        session.incoming_window,
                        session.remote_outgoing_window,
                    ),
                    "buffered": len(pull._consumer._message_buffer),
                }
                return messages, state
    raise AssertionError(f"the pull ended after {events} of {count} events")


@pytest.mark.integration
def test_transfers_taken_inline_leave_pyamqps_state_and_messages(
    make_eventhub: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same 1,000 events (two of them in several frames) through pyamqp's path and the
    inline one: the same messages, and the link and session counted the same deliveries,
    credit and windows (so the flows the SDK sends afterwards are the same). The session's
    window is 64 transfers here (65,536 by default), so both paths send its flow ~15 times."""
    from azure.eventhub._pyamqp import client

    from dagster_eventhub_ingest.resources.spark_source import _receiver

    monkeypatch.setattr(client, "INCOMING_WINDOW", 64)
    flows = [0]
    outgoing_flow = _session_class()._outgoing_flow

    def counted_flow(self: Any, frame: Any = None) -> Any:
        flows[0] += frame is None  # the session's own (a link's flow passes its fields)
        return outgoing_flow(self, frame)

    monkeypatch.setattr(_session_class(), "_outgoing_flow", counted_flow)
    hub = make_eventhub(partitions=1)
    items = bodies(1000)
    send_all(hub.producer(), items)
    inline, inline_state = _pull_all(hub.settings(), len(items))
    inline_flows, flows[0] = flows[0], 0
    monkeypatch.setattr(_receiver, "fast_transfers", lambda *_, **__: False)
    plain, plain_state = _pull_all(hub.settings(), len(items))
    plain_flows, flows[0] = flows[0], 0
    # pyamqp's own transfers too: its link decodes (the reader's _RawTransfer off)
    monkeypatch.setattr(_receiver, "raw_transfers", lambda *_, **__: False)
    pyamqps, pyamqps_state = _pull_all(hub.settings(), len(items))
    assert inline_flows == plain_flows == flows[0] == len(items) // 64
    assert inline_state.pop("inline") == "_TransferListen"
    assert plain_state.pop("inline") == pyamqps_state.pop("inline") == "NoneType"
    assert inline_state == plain_state == pyamqps_state
    assert inline_state["link"][0] == len(items) and inline_state["buffered"] == 0
    assert [m.body for m in inline] == items
    assert [event_fields(m) for m in inline] == [event_fields(m) for m in plain]
    assert [m.data for m in pyamqps] == [[body] for body in items]


@pytest.mark.integration
def test_a_patched_transfer_path_keeps_pyamqps_own(
    make_eventhub: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inline transfers do the work of the functions they were proven against: with one of them
    replaced (a subclass, a patch, an SDK that changed it), every transfer is pyamqp's."""
    hub = make_eventhub(partitions=1)
    items = bodies(300)
    send_all(hub.producer(), items)
    seen = [0]
    transfer = receiver.ReceiverLink._incoming_transfer

    def counted(self: Any, frame: Any) -> Any:
        if "Partitions" in str(self.source.address):  # not the $cbs link's token replies
            seen[0] += 1
        return transfer(self, frame)

    monkeypatch.setattr(receiver.ReceiverLink, "_incoming_transfer", counted)
    spy = Spy(monkeypatch)
    assert_read_exactly(hub.settings(), items)
    assert spy.inline == 0 and spy.sockets  # buffered reads, but no inline transfer
    assert seen[0] >= len(items)


def test_a_pull_asks_a_listen_for_no_more_frames_than_can_arrive() -> None:
    """The link's credit left (a full window when it is spent: the SDK flows first), and never
    more than the events the range still needs."""
    from dagster_eventhub_ingest.resources.spark_source._receiver import _PartitionPull

    pull = object.__new__(_PartitionPull)
    pull._prefetch, pull._next, pull._end = 300, 1000, None
    handler = SimpleNamespace(_link=SimpleNamespace(current_link_credit=5))
    assert pull._frames(handler) == 5  # mid-window: the flow comes only after this listen
    handler._link.current_link_credit = 0
    assert pull._frames(handler) == 300  # spent: this call flows a whole window first
    pull._end = 1049
    assert pull._frames(handler) == 50  # the range's tail
    handler._link.current_link_credit = 20
    assert pull._frames(handler) == 20
    pull._next = 1050  # past the end (a reconnect's redelivery): still a valid listen
    assert pull._frames(handler) == 1
    assert pull._frames(SimpleNamespace()) == 1  # no link attribute: the prefetch, capped


@pytest.mark.integration
def test_a_range_that_ends_where_the_partition_ends_asks_for_no_frame_that_cannot_come(
    make_eventhub: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """350 events in credit windows of 300: the service sends the last 50 and no more. pyamqp's
    listen waits one socket timeout (0.2 s, 1 s over WebSocket) for every frame it asked for
    that does not come, so each listen asks for at most what the range still needs."""
    from azure.eventhub._pyamqp import _connection

    hub = make_eventhub(partitions=1)
    items = [f"{n:06d}".encode() + b"x" * 1018 for n in range(350)]  # one frame each
    send_all(hub.producer(), items)
    delivered = [0]
    asked: list[tuple[int, int]] = []
    transfer = receiver.ReceiverLink._incoming_transfer
    listen = _connection.Connection.listen

    def counted(self: Any, frame: Any) -> Any:
        if "Partitions" in str(self.source.address):  # not the $cbs link's token replies
            delivered[0] += 1
        return transfer(self, frame)

    def recorded(self: Any, wait: Any = False, batch: int = 1, **kwargs: Any) -> Any:
        asked.append((batch, delivered[0]))
        return listen(self, wait=wait, batch=batch, **kwargs)

    monkeypatch.setattr(receiver.ReceiverLink, "_incoming_transfer", counted)
    monkeypatch.setattr(_connection.Connection, "listen", recorded)
    assert_read_exactly(hub.settings(), items, prefetch=300)
    assert delivered[0] == len(items)
    reads = [(batch, before) for batch, before in asked if before < len(items)]
    assert len(reads) >= 2  # a full window, then the tail
    assert all(batch <= len(items) - before for batch, before in reads), reads
    assert (50, 300) in reads
