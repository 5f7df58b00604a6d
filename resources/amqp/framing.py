"""AMQP 1.0 frames and performatives, always with every spec field present.

The builders of both ends: the emulator's (a server answering) and the reader's receiver (a
client opening, attaching, granting credit). The Azure SDK's pure-Python transport reads
performative fields by position (``attach[10]``, ``flow[6]``, ...) and fails with "list index out
of range" when a peer drops trailing null fields, so each builder here writes the full field
list. Descriptors are small ulongs (``00 53 xx``), which is what the SDK's frame decoder assumes.
"""

from __future__ import annotations

import struct
from typing import Any

from dagster_eventhub_ingest.resources.amqp.codec import (
    Array,
    Described,
    Symbol,
    UByte,
    UInt,
    ULong,
    UShort,
    decode,
    encode,
    encode_into,
    skip,
)

__all__ = [
    "AMQP_HEADER",
    "SASL_HEADER",
    "Performative",
    "accepted",
    "amqp_error",
    "attach",
    "begin",
    "close",
    "detach",
    "disposition",
    "empty_frame",
    "end",
    "flow",
    "frame",
    "open_",
    "parse_performative",
    "rejected",
    "sasl_init",
    "sasl_mechanisms",
    "sasl_outcome",
    "source",
    "target",
    "transfer",
    "transfer_header",
]

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"


class Performative:
    """Descriptor codes of the AMQP performatives and SASL frames."""

    OPEN = 0x10
    BEGIN = 0x11
    ATTACH = 0x12
    FLOW = 0x13
    TRANSFER = 0x14
    DISPOSITION = 0x15
    DETACH = 0x16
    END = 0x17
    CLOSE = 0x18
    SASL_MECHANISMS = 0x40
    SASL_INIT = 0x41
    SASL_OUTCOME = 0x44


_FRAME_HEADER = struct.Struct(">IBBH")


def frame(channel: int, body: bytes, frame_type: int = 0) -> bytes:
    """One frame: 8-byte header (size, doff=2, type, channel) then ``body``."""
    return _FRAME_HEADER.pack(8 + len(body), 2, frame_type, channel) + body


def empty_frame() -> bytes:
    """A heartbeat frame (no body) that keeps an idle connection alive."""
    return _FRAME_HEADER.pack(8, 2, 0, 0)


def _performative(code: int, fields: list[Any]) -> bytes:
    out = bytearray()
    encode_into(out, Described(ULong(code), fields))
    return bytes(out)


def parse_performative(body: bytes) -> tuple[int, list[Any], int]:
    """Decode a frame body: ``(descriptor code, fields, position where the payload starts)``."""
    value, end = decode(body, 0)
    if not isinstance(value, Described) or not isinstance(value.value, list):
        raise ValueError("frame body is not a described list")
    return int(value.descriptor), value.value, end


def amqp_error(condition: str, description: str, info: dict[Any, Any] | None = None) -> Described:
    """An AMQP ``error`` (condition, description, info) for detach, end, close and rejected."""
    return Described(ULong(0x1D), [Symbol(condition), description, info])


def accepted() -> Described:
    """The ``accepted`` outcome (an empty list, written as list8, not list0)."""
    return Described(ULong(0x24), [])


def rejected(condition: str, description: str) -> Described:
    """The ``rejected`` outcome carrying an error."""
    return Described(ULong(0x25), [amqp_error(condition, description)])


def sasl_mechanisms(mechanisms: list[str]) -> bytes:
    """sasl-mechanisms frame (type 1) offering ``mechanisms``."""
    body = _performative(Performative.SASL_MECHANISMS, [Array(Symbol, mechanisms)])
    return frame(0, body, frame_type=1)


def sasl_outcome(code: int) -> bytes:
    """sasl-outcome frame (type 1): code 0 is ok."""
    return frame(0, _performative(Performative.SASL_OUTCOME, [UByte(code), None]), frame_type=1)


def sasl_init(mechanism: str, initial_response: bytes, hostname: str | None) -> bytes:
    """sasl-init frame (type 1): the client's choice of mechanism."""
    fields = [Symbol(mechanism), initial_response, hostname]
    return frame(0, _performative(Performative.SASL_INIT, fields), frame_type=1)


def open_(
    container_id: str,
    max_frame_size: int,
    idle_timeout_ms: int | None,
    *,
    hostname: str | None = None,
    properties: dict[Any, Any] | None = None,
) -> bytes:
    """Open performative with all 10 fields (``hostname`` and ``properties``: a client's)."""
    fields = [
        container_id,
        hostname,
        UInt(max_frame_size),
        UShort(65535),  # channel-max
        UInt(idle_timeout_ms) if idle_timeout_ms else None,
        None,  # outgoing-locales
        None,  # incoming-locales
        None,  # offered-capabilities
        None,  # desired-capabilities
        properties,
    ]
    return frame(0, _performative(Performative.OPEN, fields))


def begin(
    channel: int,
    remote_channel: int | None,
    next_outgoing_id: int,
    incoming_window: int,
    outgoing_window: int,
) -> bytes:
    """Begin performative with all 8 fields (``remote_channel`` None: the client's own begin)."""
    fields = [
        None if remote_channel is None else UShort(remote_channel),
        UInt(next_outgoing_id),
        UInt(incoming_window),
        UInt(outgoing_window),
        UInt(0xFFFFFFFF),  # handle-max
        None,
        None,
        None,
    ]
    return frame(channel, _performative(Performative.BEGIN, fields))


class Raw:
    """Already-encoded AMQP bytes to splice into a performative (e.g. an echoed source)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


def _encode_fields(code: int, fields: list[Any]) -> bytes:
    body = bytearray()
    for f in fields:
        if isinstance(f, Raw):
            body += f.data
        else:
            encode_into(body, f)
    out = bytearray(b"\x00\x53")
    out.append(code)
    if len(body) + 1 < 256:
        out += struct.pack(">BBB", 0xC0, len(body) + 1, len(fields))
    else:
        out += struct.pack(">BII", 0xD0, len(body) + 4, len(fields))
    out += body
    return bytes(out)


def attach(
    channel: int,
    *,
    name: str,
    handle: int,
    role_receiver: bool,
    source: bytes | None,
    target: bytes | None,
    snd_settle_mode: int,
    rcv_settle_mode: int,
    initial_delivery_count: int | None,
    max_message_size: int | None,
    offered_capabilities: list[str] | None = None,
    desired_capabilities: list[str] | None = None,
    properties: dict[Any, Any] | None = None,
    incomplete_unsettled: bool | None = False,
) -> bytes:
    """Attach performative with all 14 fields; ``source``/``target`` are raw encodings or None
    (a client leaves ``incomplete_unsettled`` and ``max_message_size`` null, as the SDK does)."""
    fields: list[Any] = [
        name,
        UInt(handle),
        role_receiver,
        UByte(snd_settle_mode),
        UByte(rcv_settle_mode),
        Raw(source) if source is not None else None,
        Raw(target) if target is not None else None,
        None,  # unsettled
        incomplete_unsettled,
        UInt(initial_delivery_count) if initial_delivery_count is not None else None,
        None if max_message_size is None else ULong(max_message_size),
        Array(Symbol, offered_capabilities) if offered_capabilities else None,
        Array(Symbol, desired_capabilities) if desired_capabilities else None,
        properties,
    ]
    return frame(channel, _encode_fields(Performative.ATTACH, fields))


def flow(
    channel: int,
    *,
    next_incoming_id: int,
    incoming_window: int,
    next_outgoing_id: int,
    outgoing_window: int,
    handle: int | None = None,
    delivery_count: int | None = None,
    link_credit: int | None = None,
    available: int | None = None,
    echo: bool = False,
) -> bytes:
    """Flow performative with all 11 fields."""
    fields = [
        UInt(next_incoming_id),
        UInt(incoming_window),
        UInt(next_outgoing_id),
        UInt(outgoing_window),
        UInt(handle) if handle is not None else None,
        UInt(delivery_count & 0xFFFFFFFF) if delivery_count is not None else None,
        UInt(link_credit) if link_credit is not None else None,
        UInt(available) if available is not None else None,
        False,  # drain
        echo,
        None,  # properties
    ]
    return frame(channel, _performative(Performative.FLOW, fields))


# A transfer performative with fixed-width fields so it can be written with one struct.pack:
#   00 53 14 c0 <size> 0b
#   70 handle(4)  70 delivery-id(4)  a0 04 tag(4)  43 (format 0)  41 (settled)  42|41 (more)
#   40 (rcv-settle-mode)  40 (state)  42 (resume)  42 (aborted)  42 (batchable)
_TRANSFER = struct.Struct(">IBBH" + "BBBBBB" + "BI" + "BI" + "BBI" + "BBB" + "BBBBB")
_TRANSFER_BODY_SIZE = _TRANSFER.size - 8
_TRANSFER_LIST_SIZE = _TRANSFER_BODY_SIZE - 5  # bytes after the size byte (count + fields)


def transfer_header(
    channel: int, handle: int, delivery_id: int, payload_len: int, more: bool
) -> bytes:
    """Frame header plus a pre-settled transfer performative (11 fields) for one payload chunk."""
    return _TRANSFER.pack(
        8 + _TRANSFER_BODY_SIZE + payload_len,
        2,
        0,
        channel,
        0x00,
        0x53,
        Performative.TRANSFER,
        0xC0,
        _TRANSFER_LIST_SIZE,
        11,
        0x70,
        handle,
        0x70,
        delivery_id & 0xFFFFFFFF,
        0xA0,
        4,
        delivery_id & 0xFFFFFFFF,
        0x43,
        0x41,
        0x41 if more else 0x42,
        0x40,
        0x40,
        0x42,
        0x42,
        0x42,
    )


TRANSFER_OVERHEAD = _TRANSFER.size


def transfer(
    channel: int, handle: int, delivery_id: int, tag: bytes, payload: bytes, *, settled: bool
) -> bytes:
    """One whole message in one transfer frame (11 fields), e.g. a CBS request."""
    fields = [
        UInt(handle),
        UInt(delivery_id),
        tag,
        UInt(0),  # message-format
        settled,
        False,  # more
        None,  # rcv-settle-mode
        None,  # state
        False,  # resume
        False,  # aborted
        False,  # batchable
    ]
    return frame(channel, _performative(Performative.TRANSFER, fields) + payload)


def source(address: str, filters: dict[Any, Any] | None = None) -> bytes:
    """A link source (all 11 fields) with ``address`` and a filter set, encoded."""
    fields: list[Any] = [address, None, None, None, None, None, None, filters, None, None, None]
    return encode(Described(ULong(0x28), fields))


def target(address: str) -> bytes:
    """A link target (all 7 fields) with ``address``, encoded."""
    return encode(Described(ULong(0x29), [address, None, None, None, None, None, None]))


def disposition(
    channel: int, *, first: int, last: int, state: Described, role_receiver: bool = True
) -> bytes:
    """Settled disposition with all 6 fields."""
    fields = [role_receiver, UInt(first), UInt(last), True, state, False]
    return frame(channel, _performative(Performative.DISPOSITION, fields))


def detach(channel: int, handle: int, closed: bool, error: Described | None = None) -> bytes:
    """Detach performative with all 3 fields."""
    return frame(channel, _performative(Performative.DETACH, [UInt(handle), closed, error]))


def end(channel: int, error: Described | None = None) -> bytes:
    """End performative (1 field)."""
    return frame(channel, _performative(Performative.END, [error]))


def close(error: Described | None = None) -> bytes:
    """Close performative (1 field)."""
    return frame(0, _performative(Performative.CLOSE, [error]))


def section_spans(payload: bytes) -> list[tuple[int, int, int]]:
    """Split an encoded message into ``(descriptor code, start, end)`` per section."""
    spans = []
    pos = 0
    n = len(payload)
    while pos < n:
        if payload[pos] != 0x00:
            raise ValueError(f"message section at {pos} is not a described value")
        code_value, value_pos = decode(payload, pos + 1)
        end_pos = skip(payload, value_pos)
        spans.append((int(code_value), pos, end_pos))
        pos = end_pos
    return spans


def encode_section(code: int, value: Any) -> bytes:
    """One message section (``00 53 code`` + value)."""
    return encode(Described(ULong(code), value))
