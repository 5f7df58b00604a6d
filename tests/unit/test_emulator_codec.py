"""The emulator's own AMQP codec and framing, cross-checked against the SDK's independent codec."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from azure.eventhub._pyamqp._decode import decode_frame, decode_payload
from azure.eventhub._pyamqp._encode import encode_payload
from azure.eventhub._pyamqp.message import Message, Properties
from hypothesis import given
from hypothesis import strategies as st

from dagster_eventhub_ingest.emulator.hub import build_stored_payload
from dagster_eventhub_ingest.emulator.partition_key import lookup3, partition_for_key
from dagster_eventhub_ingest.resources.amqp import framing
from dagster_eventhub_ingest.resources.amqp.codec import (
    AMQPDecodeError,
    Array,
    Described,
    Symbol,
    Timestamp,
    UInt,
    ULong,
    decode,
    encode,
    skip,
    split_list,
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.text(max_size=300),
    st.binary(max_size=300),
    st.floats(allow_nan=False),
    st.uuids(),
    st.builds(Symbol, st.text(alphabet="abcxyz:-.", max_size=40)),
    st.builds(Timestamp, st.integers(min_value=0, max_value=2**62)),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=8),
        st.dictionaries(st.text(max_size=20), inner, max_size=6),
    ),
    max_leaves=30,
)


@given(values)
def test_roundtrip_and_skip(value: Any) -> None:
    data = encode(value)
    decoded, end = decode(data)
    assert end == len(data) == skip(data, 0)
    assert decoded == value
    assert type(decoded) is type(value) or isinstance(value, (bool, type(None)))


def test_lists_never_use_list0_and_keep_trailing_nulls() -> None:
    data = encode([None, None, None])
    assert data == b"\xc0\x04\x03\x40\x40\x40"
    assert encode([]) == b"\xc0\x01\x00"
    assert decode(encode([1, None]))[0] == [1, None]


def test_exact_types_are_written() -> None:
    assert encode(ULong(0x12)) == b"\x53\x12"
    assert encode(UInt(70000)) == b"\x70\x00\x01\x11\x70"
    assert encode(Timestamp(1)) == b"\x83" + (1).to_bytes(8, "big")
    assert encode(Symbol("ab")) == b"\xa3\x02ab"
    assert encode(Array(str, ["0", "1"])) == b"\xe0\x06\x02\xa1\x010\x011"


@pytest.mark.parametrize("bad", [b"\xa1\x05ab", b"\xc0\x05\x02\x40", b"\x74\x00", b""])
def test_malformed_input_is_a_decode_error(bad: bytes) -> None:
    with pytest.raises(AMQPDecodeError):
        decode(bad)
        skip(bad, 0)


def test_sdk_decodes_our_performatives_with_every_field() -> None:
    """The SDK reads fields by position: each performative must carry all of them."""
    cases = {
        framing.open_("c", 1 << 20, None): (0x10, 10),
        framing.begin(0, 3, 0, 100, 100): (0x11, 8),
        framing.flow(
            0, next_incoming_id=1, incoming_window=2, next_outgoing_id=3, outgoing_window=4
        ): (0x13, 11),
        framing.disposition(0, first=5, last=5, state=framing.accepted()): (0x15, 6),
        framing.detach(0, 1, True, framing.amqp_error("amqp:link:stolen", "x")): (0x16, 3),
        framing.end(0): (0x17, 1),
        framing.close(): (0x18, 1),
    }
    for frame, (code, n) in cases.items():
        kind, fields = decode_frame(memoryview(frame[8:]))
        assert (kind, len(fields)) == (code, n)
    attach = framing.attach(
        0,
        name="link",
        handle=2,
        role_receiver=False,
        source=encode(Described(ULong(0x28), ["src"] + [None] * 10)),
        target=encode(Described(ULong(0x29), ["tgt"] + [None] * 6)),
        snd_settle_mode=1,
        rcv_settle_mode=0,
        initial_delivery_count=0,
        max_message_size=1 << 20,
    )
    kind, fields = decode_frame(memoryview(attach[8:]))
    assert kind == 0x12 and len(fields) == 14
    assert fields[5][0] == b"src" and fields[9] == 0 and fields[10] == 1 << 20
    header = framing.transfer_header(1, 7, 123456, 5, more=True)
    kind, fields = decode_frame(memoryview(header[8:] + b"hello"))
    assert kind == 0x14 and len(fields) == 12  # 11 fields + the payload the SDK appends
    assert fields[:6] == [7, 123456, (123456).to_bytes(4, "big"), 0, True, True]
    assert bytes(fields[11]) == b"hello"


def test_sdk_messages_decode_and_stored_payload_reads_back_in_sdk() -> None:
    message_id = uuid.uuid4()
    sdk = Message(
        data=[b"payload"],
        properties=Properties(message_id=message_id, content_type="text/plain"),
        application_properties={"k": "v", "n": 7},
        message_annotations={"x-opt-partition-key": "pk-1", "custom": "keep"},
    )
    out = bytearray()
    encode_payload(out, sdk)
    payload, split, key = build_stored_payload(bytes(out), 42, 1000, 1_700_000_000_123, None)
    assert key == "pk-1"
    decoded = decode_payload(memoryview(payload))
    assert decoded.data == [b"payload"]
    assert decoded.application_properties == {b"k": b"v", b"n": 7}
    assert decoded.properties.message_id == message_id
    annotations = decoded.message_annotations
    assert annotations[b"x-opt-sequence-number"] == 42
    assert annotations[b"x-opt-offset"] == b"1000"
    assert annotations[b"x-opt-enqueued-time"] == 1_700_000_000_123
    assert annotations[b"x-opt-partition-key"] == b"pk-1"
    assert annotations[b"custom"] == b"keep"
    assert split == 0  # no header section: delivery annotations go first


def test_split_list_spans() -> None:
    data = encode([1, "two", [3]])
    spans, end = split_list(data, 0)
    assert end == len(data)
    assert [decode(data, s)[0] for s, _ in spans] == [1, "two", [3]]


def test_partition_key_hash_islookup3() -> None:
    # Published test vectors of Bob Jenkins' lookup3.c (hashlittle2, zero seeds).
    assert lookup3(b"") == (0xDEADBEEF, 0xDEADBEEF)
    assert lookup3(b"Four score and seven years ago") == (0x17770551, 0xCE7226E6)
    spread = {partition_for_key(f"k{i}", 8) for i in range(200)}
    assert spread == set(range(8))
    assert partition_for_key("same", 8) == partition_for_key("same", 8)


def test_messages_of_any_sections_are_stored_as_sent() -> None:
    """Value and sequence bodies, described values, arrays, maps with binary keys, chars and
    decimals: the stored event is the message as sent, the service's annotations added; a
    send's partition key is found even among annotation keys no dict can hold (lists)."""
    from dagster_eventhub_ingest.emulator.wire import split_batch
    from tests.support import amqp_corpus as c
    from tests.support.amqp_corpus import CORPUS

    for golden in CORPUS:
        sent = golden.message
        stored, split, key = build_stored_payload(sent, 7, 70, 1_700_000_000_000, None)
        assert stored[:split] == b"" and key == golden.partition_key, golden.name
        # Every section but the annotations is kept byte for byte, in order.
        kept = [sent[s:e] for code, s, e in framing.section_spans(sent) if code != 0x72]
        again = [stored[s:e] for code, s, e in framing.section_spans(stored) if code != 0x72]
        assert kept == again, golden.name
    odd = c.section(
        0x72,
        c.map_(
            (c.list_(c.long(1)), c.string("a list key")),
            (c.symbol("x-opt-partition-key"), c.string("device-1")),
        ),
    ) + c.section(0x77, c.map_((c.binary(b"\x00"), c.char(0x1F600))))
    assert split_batch(odd, 0) == ([odd], "device-1")
