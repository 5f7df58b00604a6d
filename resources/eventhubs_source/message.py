"""A received message's AMQP bytes as one row of the source schema (the reader's Python path).

:func:`decode_event` reads the sections of a message as the service delivers it and returns an
:class:`Event`: what each column holds, in the connector's terms (azure-event-hubs-spark reads
the Java SDK's ``EventData``; ``values`` has the text of each AMQP type):

* ``body``: the data sections' bytes, joined (the connector keeps the first one only); None
  when the body is an ``amqp-value`` or ``amqp-sequence`` (the connector's ``getBytes()`` is
  null for those) or there is no body at all.
* ``amqpBody``: those ``amqp-value`` / ``amqp-sequence`` sections as received, so nothing is
  lost; None for a data body. A message that is not valid AMQP (which the service does not
  deliver) is kept here whole, with every column read as far as it could be.
* ``offset``, ``sequenceNumber``, ``enqueuedTime``, ``partitionKey``, ``publisher``: their
  ``x-opt-*`` annotations (symbol or string keys).
* ``properties``: the application properties, ``(key, text)`` in the order received.
* ``systemProperties``: every other annotation, ``x-opt-partition-key`` and ``x-opt-publisher``
  included (the connector drops only offset, sequence number and enqueued time), then the
  message properties that are set, named as the Java SDK names them (``message-id``,
  ``user-id``, ``to``, ``subject``, ``reply-to``, ``correlation-id``, ``content-type``,
  ``content-encoding``, ``absolute-expiry-time``, ``creation-time``, ``group-id``,
  ``group-sequence``, ``reply-to-group-id``); the two times in milliseconds, as the Java SDK's
  ``getExpiryTime()`` / ``getCreationTime()`` give them.

Nothing here raises: an event is never what stops a partition. ``_amqp_columns.c`` lays out the
same rows for the messages it takes (tests/integration/test_native_columns.py).
"""

from __future__ import annotations

import struct
from typing import Any

from dagster_eventhub_ingest.resources.amqp.codec import FIXED_WIDTH
from dagster_eventhub_ingest.resources.eventhubs_source.values import (
    MalformedAMQP,
    compound_head,
    skip,
    text,
)

__all__ = ["MESSAGE_PROPERTY_NAMES", "Event", "decode_event"]

#: The message properties' names in systemProperties, in the properties section's field order.
MESSAGE_PROPERTY_NAMES = (
    "message-id",
    "user-id",
    "to",
    "subject",
    "reply-to",
    "correlation-id",
    "content-type",
    "content-encoding",
    "absolute-expiry-time",
    "creation-time",
    "group-id",
    "group-sequence",
    "reply-to-group-id",
)

_SEQ = b"x-opt-sequence-number"
_OFFSET = b"x-opt-offset"
_TIME = b"x-opt-enqueued-time"
_PKEY = b"x-opt-partition-key"
_PUBLISHER = b"x-opt-publisher"
_COLUMN_KEYS = frozenset((_SEQ, _OFFSET, _TIME, _PKEY, _PUBLISHER))

#: Integer constructors (any width, signed or not) and timestamps: a sequence number or a time.
_INTEGERS = frozenset(
    (0x43, 0x44, 0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x60, 0x61, 0x70, 0x71, 0x80, 0x81, 0x83)
)
_INT64_MAX = (1 << 63) - 1
#: The enqueued times a row holds, in milliseconds: 0001-01-01 to 9999-12-31, what a Spark
#: timestamp and a Python datetime can hold. Another time (only a damaged or hostile frame has
#: one) leaves ``enqueuedTime`` null rather than a value that fails whoever converts it.
TIME_MIN_MS = -62_135_596_800_000
TIME_MAX_MS = 253_402_300_799_999

#: Section names used as symbolic descriptors (AMQP 1.0, 3.2).
_SECTION_NAMES = {
    b"amqp:header:list": 0x70,
    b"amqp:delivery-annotations:map": 0x71,
    b"amqp:message-annotations:map": 0x72,
    b"amqp:properties:list": 0x73,
    b"amqp:application-properties:map": 0x74,
    b"amqp:data:binary": 0x75,
    b"amqp:amqp-sequence:list": 0x76,
    b"amqp:amqp-value:*": 0x77,
    b"amqp:footer:map": 0x78,
}

_u32 = struct.Struct(">I").unpack_from
_u64 = struct.Struct(">Q").unpack_from
_i64 = struct.Struct(">q").unpack_from


class Event:
    """One message as the columns of the source schema (see the module docstring)."""

    __slots__ = (
        "amqp_body",
        "body",
        "offset",
        "partition_key",
        "problem",
        "properties",
        "publisher",
        "seq",
        "system_properties",
        "time_ms",
    )

    def __init__(self) -> None:
        self.seq: int | None = None
        self.body: bytes | None = None
        self.amqp_body: bytes | None = None
        self.offset: str | None = None
        self.time_ms: int | None = None
        self.publisher: str | None = None
        self.partition_key: str | None = None
        self.properties: list[tuple[str, str]] = []
        self.system_properties: list[tuple[str, str]] = []
        #: Why the message is not read whole (kept in ``amqp_body``), else None.
        self.problem: str | None = None

    def __repr__(self) -> str:
        return f"Event(seq={self.seq}, {len(self.body or b'')} body bytes)"

    @property
    def unusual(self) -> str | None:
        """What the reader logs about this event: a body that is not data, or bytes it could
        not decode; None for the usual event."""
        if self.problem is not None:
            return f"not valid AMQP ({self.problem}); kept whole in amqpBody"
        if self.amqp_body is not None:
            return "its body is an amqp-value or amqp-sequence: body is null, amqpBody holds it"
        return None


def decode_event(b: bytes) -> Event:
    """The row of the message ``b`` (its sections as received). Never raises."""
    ev = Event()
    data: list[bytes] | None = None
    other: list[bytes] | None = None
    mprops: list[tuple[str, str]] = []
    n = len(b)
    i = 0
    try:
        while i < n:
            code, j = _section(b, i, n)
            if code == 0x75:
                c = b[j]
                if c == 0xB0:
                    k = j + 5 + _u32(b, j + 1)[0]
                    part = b[j + 5 : k]
                elif c == 0xA0:
                    k = j + 2 + b[j + 1]
                    part = b[j + 2 : k]
                else:
                    raise MalformedAMQP(f"a data section holding constructor 0x{c:02x}")
                if k > n:
                    raise MalformedAMQP("a data section runs past the message")
                if data is None:
                    data = [part]
                else:
                    data.append(part)
            elif code == 0x72:
                k = _annotations(b, j, n, ev)
            elif code == 0x74:
                k = _application_properties(b, j, n, ev.properties)
            elif code == 0x73:
                k = _message_properties(b, j, n, mprops)
            elif code == 0x76 or code == 0x77:
                k = skip(b, j, n)
                if other is None:
                    other = [b[i:k]]
                else:
                    other.append(b[i:k])
            elif 0x70 <= code <= 0x78:
                k = skip(b, j, n)  # header, delivery annotations, footer: not in the schema
            else:
                raise MalformedAMQP(f"an unknown section 0x{code:x}")
            i = k
    except (MalformedAMQP, IndexError, struct.error, ValueError) as exc:
        ev.problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        ev.amqp_body = bytes(b)
    if data is not None:
        ev.body = data[0] if len(data) == 1 else b"".join(data)
    if other is not None and ev.problem is None:
        ev.amqp_body = other[0] if len(other) == 1 else b"".join(other)
    if mprops:
        ev.system_properties.extend(mprops)
    return ev


def _section(b: bytes, i: int, n: int) -> tuple[int, int]:
    """The section code at ``b[i]`` (a described value) and the index of its value."""
    if b[i] != 0x00:
        raise MalformedAMQP(f"a section that is not a described value (0x{b[i]:02x})")
    d = b[i + 1]
    if d == 0x53:
        if i + 3 >= n:
            raise MalformedAMQP("a section without a value")
        return b[i + 2], i + 3
    if d == 0x80:
        return _u64(b, i + 2)[0], i + 10
    if d == 0xA3:
        j = i + 3 + b[i + 2]
        code = _SECTION_NAMES.get(b[i + 3 : j])
        if code is None:
            raise MalformedAMQP("an unknown section descriptor")
        return code, j
    raise MalformedAMQP(f"a section descriptor of constructor 0x{d:02x}")


def _map_head(b: bytes, j: int, n: int) -> tuple[int, int, int]:
    """A map (map8, map32) at ``b[j]``: its first key, its count of pairs, where it ends."""
    c = b[j]
    if c != 0xC1 and c != 0xD1:
        raise MalformedAMQP(f"a map section holding constructor 0x{c:02x}")
    first, count, stop = compound_head(c, b, j + 1, n)
    return first, count >> 1, stop


def _string_key(b: bytes, i: int, stop: int) -> tuple[bytes | None, int]:
    """A symbol or string key's bytes and the index after it; None for other keys."""
    c = b[i]
    if c == 0xA3 or c == 0xA1:
        j = i + 2 + b[i + 1]
    elif c == 0xB3 or c == 0xB1:
        j = i + 5 + _u32(b, i + 1)[0]
    else:
        return None, i
    if j > stop:
        raise MalformedAMQP("a key runs past its map")
    return b[i + (2 if c < 0xB0 else 5) : j], j


def _integer(b: bytes, i: int, stop: int) -> tuple[int | None, int]:
    """An integer or timestamp value (None for any other type), the index after it."""
    c = b[i]
    if c not in _INTEGERS:
        return None, skip(b, i, stop)
    width = FIXED_WIDTH[c]
    j = i + 1 + width
    if j > stop:
        raise MalformedAMQP("a value runs past its map")
    if width == 0:
        return 0, j
    v = int.from_bytes(b[i + 1 : j], "big", signed=c not in (0x50, 0x52, 0x53, 0x60, 0x70, 0x80))
    return v, j


def _annotations(b: bytes, j: int, n: int, ev: Event) -> int:
    if b[j] == 0x40:
        return j + 1
    i, pairs, stop = _map_head(b, j, n)
    sysprops = ev.system_properties
    for _ in range(pairs):
        name, k = _string_key(b, i, stop)
        if name is None or name not in _COLUMN_KEYS:
            key, k = text(b, i, stop)
            value, i = text(b, k, stop)
            sysprops.append((key, value))
        elif name == _SEQ:
            seq, i = _integer(b, k, stop)
            ev.seq = seq if seq is not None and seq <= _INT64_MAX else None
        elif name == _TIME:
            ms, i = _integer(b, k, stop)
            ev.time_ms = ms if ms is not None and TIME_MIN_MS <= ms <= TIME_MAX_MS else None
        else:
            if b[k] == 0x40:
                value, i = None, k + 1
            else:
                value, i = text(b, k, stop)
            if name == _OFFSET:
                ev.offset = value
                continue
            if name == _PKEY:
                ev.partition_key = value
            else:
                ev.publisher = value
            # The connector keeps these two in systemProperties as well.
            sysprops.append((name.decode("ascii"), "null" if value is None else value))
    if i != stop:
        raise MalformedAMQP("the annotations do not fill their map")
    return stop


def _text(b: bytes, i: int, stop: int) -> tuple[str, int]:
    """:func:`.values.text`, the usual key or value (a short UTF-8 string) without its calls."""
    if b[i] == 0xA1:
        j = i + 2 + b[i + 1]
        if j <= stop:
            try:
                return b[i + 2 : j].decode("utf-8"), j
            except UnicodeDecodeError:
                pass
    return text(b, i, stop)


def _application_properties(b: bytes, j: int, n: int, out: list[tuple[str, str]]) -> int:
    if b[j] == 0x40:
        return j + 1
    i, pairs, stop = _map_head(b, j, n)
    for _ in range(pairs):
        key, k = _text(b, i, stop)
        value, i = _text(b, k, stop)
        out.append((key, value))
    if i != stop:
        raise MalformedAMQP("the application properties do not fill their map")
    return stop


def _message_properties(b: bytes, j: int, n: int, out: list[tuple[str, str]]) -> int:
    c = b[j]
    if c == 0x45:
        return j + 1
    if c != 0xC0 and c != 0xD0:
        raise MalformedAMQP(f"a properties section holding constructor 0x{c:02x}")
    i, count, stop = compound_head(c, b, j + 1, n)
    if count > len(MESSAGE_PROPERTY_NAMES):
        raise MalformedAMQP("a properties section of more fields than AMQP's 13")
    for field in range(count):
        c = b[i]
        if c == 0x40:
            i += 1
            continue
        if (field == 8 or field == 9) and c == 0x83:
            # absolute-expiry-time, creation-time: the Java SDK's long milliseconds
            if i + 9 > stop:
                raise MalformedAMQP("a value runs past its list")
            value: Any = str(_i64(b, i + 1)[0])
            i += 9
        else:
            value, i = text(b, i, stop)
        out.append((MESSAGE_PROPERTY_NAMES[field], value))
    if i != stop:
        raise MalformedAMQP("the properties do not fill their list")
    return stop
