"""A golden corpus: events of every shape, and what azure-event-hubs-spark reads of each.

Each :class:`Golden` is one message as a client sends it (the Python SDK's own encoding where the
SDK can send it, hand-encoded AMQP where only other clients can: chars, decimal32/64, described
values, arrays, maps with binary keys...) and the row the reader must give: body, amqpBody,
partition key, publisher, application properties and systemProperties, each text as the
connector writes it (``EventHubsSourceProvider.toInternalRow``: strings as they are, everything
else through json4s) or, where the connector loses the value, the lossless text
docs/spark_source.md names. The service's own annotations (sequence number, offset, enqueued
time) are added on the way (:func:`delivered`, the emulator's encoding of a stored event).

Used frame by frame on both reader paths (tests/unit/test_reader_values.py), through the emulator
and Spark, and through every sink.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

__all__ = ["CORPUS", "Golden", "delivered"]


# -- AMQP encodings, as any client writes them --------------------------------------------------


def null() -> bytes:
    return b"\x40"


def boolean(v: bool) -> bytes:
    return b"\x41" if v else b"\x42"


def ubyte(v: int) -> bytes:
    return b"\x50" + struct.pack(">B", v)


def byte(v: int) -> bytes:
    return b"\x51" + struct.pack(">b", v)


def ushort(v: int) -> bytes:
    return b"\x60" + struct.pack(">H", v)


def short(v: int) -> bytes:
    return b"\x61" + struct.pack(">h", v)


def uint(v: int) -> bytes:
    return b"\x70" + struct.pack(">I", v)


def int_(v: int) -> bytes:
    return b"\x71" + struct.pack(">i", v)


def ulong(v: int) -> bytes:
    return b"\x80" + struct.pack(">Q", v)


def long(v: int) -> bytes:
    return b"\x81" + struct.pack(">q", v)


def float_(v: float) -> bytes:
    return b"\x72" + struct.pack(">f", v)


def double(v: float) -> bytes:
    return b"\x82" + struct.pack(">d", v)


def decimal32(bits: int) -> bytes:
    return b"\x74" + struct.pack(">i", bits)


def decimal64(bits: int) -> bytes:
    return b"\x84" + struct.pack(">q", bits)


def decimal128(raw: bytes) -> bytes:
    assert len(raw) == 16
    return b"\x94" + raw


def char(cp: int) -> bytes:
    return b"\x73" + struct.pack(">I", cp)


def timestamp(ms: int) -> bytes:
    return b"\x83" + struct.pack(">q", ms)


def uuid_(u: uuid.UUID) -> bytes:
    return b"\x98" + u.bytes


def _variable(small: int, large: int, raw: bytes) -> bytes:
    if len(raw) < 256:
        return bytes((small, len(raw))) + raw
    return bytes((large,)) + struct.pack(">I", len(raw)) + raw


def binary(raw: bytes) -> bytes:
    return _variable(0xA0, 0xB0, raw)


def string(s: str | bytes) -> bytes:
    return _variable(0xA1, 0xB1, s.encode("utf-8") if isinstance(s, str) else s)


def symbol(s: str) -> bytes:
    return _variable(0xA3, 0xB3, s.encode("ascii"))


def _compound(small: int, large: int, count: int, body: bytes) -> bytes:
    if len(body) + 1 < 256 and count < 256:
        return bytes((small, len(body) + 1, count)) + body
    return bytes((large,)) + struct.pack(">II", len(body) + 4, count) + body


def list_(*items: bytes) -> bytes:
    return _compound(0xC0, 0xD0, len(items), b"".join(items))


def map_(*pairs: tuple[bytes, bytes]) -> bytes:
    return _compound(0xC1, 0xD1, 2 * len(pairs), b"".join(k + v for k, v in pairs))


def array(constructor: bytes, *elements: bytes) -> bytes:
    """Elements encoded without their constructor, after the one ``constructor``."""
    return _compound(0xE0, 0xF0, len(elements), constructor + b"".join(elements))


def described(descriptor: bytes, value: bytes) -> bytes:
    return b"\x00" + descriptor + value


def section(code: int, value: bytes) -> bytes:
    return b"\x00\x53" + bytes((code,)) + value


def annotations(*pairs: tuple[str, bytes]) -> bytes:
    return section(0x72, map_(*((symbol(k), v) for k, v in pairs)))


def application_properties(*pairs: tuple[bytes, bytes]) -> bytes:
    return section(0x74, map_(*pairs))


def data(raw: bytes) -> bytes:
    return section(0x75, binary(raw))


def props(*pairs: tuple[str, bytes]) -> bytes:
    """Application properties with string keys."""
    return application_properties(*((string(k), v) for k, v in pairs))


# -- the corpus -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Golden:
    """One event as sent, and the row the reader must give of it."""

    name: str
    #: The message as the client encodes it; ``sdk`` builds it with the Python SDK instead.
    raw: bytes | None = None
    sdk: Callable[[], Any] | None = None
    body: bytes | None = b""
    amqp_body: bytes | None = None
    properties: list[tuple[str, str]] = field(default_factory=list)
    system_properties: list[tuple[str, str]] = field(default_factory=list)
    partition_key: str | None = None
    publisher: str | None = None

    @property
    def message(self) -> bytes:
        """The message's bytes as the client sends them."""
        if self.raw is not None:
            return self.raw
        assert self.sdk is not None
        return sdk_bytes(self.sdk())

    def row(self) -> dict[str, Any]:
        """The columns the reader must give (not the service's: offset, sequence number, time)."""
        return {
            "body": self.body,
            "amqpBody": self.amqp_body,
            "partitionKey": self.partition_key,
            "publisher": self.publisher,
            "properties": self.properties,
            "systemProperties": self.system_properties,
        }


def sdk_bytes(item: Any) -> bytes:
    """What the Python SDK encodes for an ``EventData`` or ``AmqpAnnotatedMessage``."""
    from azure.eventhub import EventData
    from azure.eventhub._pyamqp._encode import encode_payload
    from azure.eventhub._transport._pyamqp_transport import PyamqpTransport

    annotated = item.raw_amqp_message if isinstance(item, EventData) else item
    message = PyamqpTransport.to_outgoing_amqp_message(annotated)
    return bytes(encode_payload(bytearray(), message))


def _typed(kind: str, value: Any) -> dict[str, Any]:
    """A value of an AMQP type the SDK sends when asked by type (pyamqp's typed values)."""
    from azure.eventhub._pyamqp.types import TYPE, VALUE

    return {TYPE: kind, VALUE: value}


def _event(body: bytes, properties: dict[str, Any] | None = None) -> Any:
    from azure.eventhub import EventData

    event = EventData(body)
    if properties is not None:
        event.properties = properties
    return event


def _annotated(**kwargs: Any) -> Any:
    from azure.eventhub.amqp import AmqpAnnotatedMessage

    return AmqpAnnotatedMessage(**kwargs)


def _sdk_properties() -> Any:
    from azure.eventhub._pyamqp.types import AMQPTypes as T

    return _event(
        b"typed",
        {
            "string": "Hello, world.",
            "binary": b"\x00\xff\x00\x80",
            "true": True,
            "false": False,
            "int": 7,
            "long": _typed(T.long, -(2**40)),
            "ubyte": _typed(T.ubyte, 255),
            "byte": _typed(T.byte, -128),
            "ushort": _typed(T.ushort, 65535),
            "short": _typed(T.short, -32768),
            "uint": _typed(T.uint, 2**32 - 1),
            "ulong": _typed(T.ulong, 2**64 - 1),
            "float": _typed(T.float, 0.1),
            "double": 1e20,
            "small": 1e-7,
            "nan": float("nan"),
            "inf": float("inf"),
            "-inf": float("-inf"),
            "-zero": -0.0,
            "timestamp": _typed(T.timestamp, 1_700_000_000_123),
            "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
            "symbol": _typed(T.symbol, b"x-opt-partition-key"),
            "null": None,
            "decimal128": Decimal("1.5"),
            "list": [1, "a", b"\x01", None, True],
            "map": {b"k": 1, "s": "v"},
        },
    )


def _sdk_message_properties() -> Any:
    return _annotated(
        data_body=b"with message properties",
        properties={
            "message_id": uuid.UUID(int=9),
            "user_id": b"\x00\xff",
            "to": "sb://ns/hub",
            "subject": "subject-1",
            "reply_to": "sb://ns/replies",
            "correlation_id": 42,
            "content_type": "application/json",
            "content_encoding": "utf-8",
            "absolute_expiry_time": 1_700_000_099_000,
            "creation_time": 1_700_000_000_002,
            "group_id": "group-1",
            "group_sequence": 3,
            "reply_to_group_id": "group-2",
        },
    )


def _sdk_iot_hub() -> Any:
    """An IoT Hub device-to-cloud message as IoT Hub routes it to an Event Hub."""
    from azure.eventhub._pyamqp.types import AMQPTypes as T

    return _annotated(
        data_body=b'{"temperature": 21.5, "humidity": 40}',
        annotations={
            b"iothub-connection-device-id": "thermostat-7",
            b"iothub-connection-auth-method": (
                '{"scope":"device","type":"sas","issuer":"iothub","acceptingIpFilterRule":null}'
            ),
            b"iothub-connection-auth-generation-id": "638365123456789012",
            b"iothub-enqueuedtime": _typed(T.timestamp, 1_700_000_000_456),
            b"iothub-message-source": "Telemetry",
        },
        properties={
            "message_id": "msg-0001",
            "user_id": b"contoso-hub",
            "correlation_id": "corr-1",
            "content_type": "application/json",
            "content_encoding": "utf-8",
        },
        application_properties={"temperatureAlert": "true", "sensor": "ds18b20"},
    )


CORPUS: tuple[Golden, ...] = (
    Golden("plain", sdk=lambda: _event(b"hello"), body=b"hello"),
    Golden("empty body", sdk=lambda: _event(b""), body=b""),
    Golden("every byte", sdk=lambda: _event(bytes(range(256)) * 3), body=bytes(range(256)) * 3),
    Golden(
        "several data sections",
        sdk=lambda: _annotated(data_body=[b"ab", b"", b"cd"]),
        body=b"abcd",
    ),
    Golden(
        "application properties of every type the SDK sends",
        sdk=_sdk_properties,
        body=b"typed",
        properties=[
            ("string", "Hello, world."),
            ("binary", "[0,-1,0,-128]"),
            ("true", "true"),
            ("false", "false"),
            ("int", "7"),
            ("long", "-1099511627776"),
            ("ubyte", "255"),
            ("byte", "-128"),
            ("ushort", "65535"),
            ("short", "-32768"),
            ("uint", "4294967295"),
            ("ulong", "18446744073709551615"),
            ("float", "0.10000000149011612"),
            ("double", "1.0E20"),
            ("small", "1.0E-7"),
            ("nan", '"NaN"'),
            ("inf", '"Infinity"'),
            ("-inf", '"-Infinity"'),
            ("-zero", "-0.0"),
            ("timestamp", '"2023-11-14T22:13:20.123Z"'),
            ("uuid", "12345678-1234-5678-1234-567812345678"),
            ("symbol", "x-opt-partition-key"),
            ("null", "null"),
            ("decimal128", "[48,62,0,0,0,0,0,0,0,0,0,0,0,0,0,15]"),
            ("list", '[1,"a",[1],null,true]'),
            ("map", '{"[107]":1,"s":"v"}'),
        ],
    ),
    Golden(
        # azure-event-hubs-spark's own test ("with application properties",
        # EventHubsRelationSuite and EventHubsSourceSuite), each value as a Java client encodes
        # it, and the values its comment lists.
        "the connector's test properties",
        raw=props(
            ("A", string("Hello, world.")),
            ("B", map_()),
            ("C", array(b"\x51", b"4", b"3", b"2")),  # a Java byte[]: an array of byte
            ("D", null()),
            ("E", boolean(True)),
            ("F", int_(1)),
            ("G", long(1)),
            ("H", char(ord("a"))),
            ("I", binary(b"1")),
            ("J", symbol("x-opt-partition-key")),
            ("K", decimal128(bytes([0, 1, 2, 3, 0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 0, 0]))),
            ("L", decimal32(12)),
            ("M", decimal64(13)),
            ("N", ubyte(1)),
            ("O", ulong(987654321)),
            ("P", ushort(1)),
            ("Q", described(symbol("descriptor"), string("described"))),
        )
        + data(b"0"),
        body=b"0",
        properties=[
            ("A", "Hello, world."),
            ("B", "{}"),
            ("C", "[52,51,50]"),
            ("D", "null"),
            ("E", "true"),
            ("F", "1"),
            ("G", "1"),
            ("H", "a"),
            ("I", "[49]"),
            ("J", "x-opt-partition-key"),
            ("K", "[0,1,2,3,0,0,0,0,0,1,2,3,0,0,0,0]"),
            ("L", "12"),
            ("M", "13"),
            ("N", "1"),
            ("O", "987654321"),
            ("P", "1"),
            ("Q", "described"),
        ],
    ),
    Golden(
        "types only other clients send",
        raw=props(
            ("char", char(0x1F600)),
            ("not a char", char(0xD800)),
            ("decimal32", decimal32(-5)),
            ("decimal64", decimal64(2**62)),
            ("described binary", described(ulong(0x99), binary(b"\x80"))),
            ("ints", array(b"\x71", *(struct.pack(">i", v) for v in (1, 2, -3)))),
            ("symbols", array(b"\xa3", b"\x01a", b"\x01b")),
            ("empty array", array(b"\x40")),
            ("binary keys", map_((binary(b"\x00"), long(1)), (binary(b"k"), list_(long(1))))),
            (
                "nested",
                list_(
                    uuid_(uuid.UUID(int=1)),
                    timestamp(0),
                    char(ord('"')),
                    symbol("s"),
                    ubyte(200),
                    string('quote " backslash \\ tab \t nul \x00 é'),
                    described(symbol("d"), map_((string("k"), double(2.5)))),
                ),
            ),
            ("not UTF-8", string(b"\xff\xfe")),
            ("year 1", timestamp(-62135769600000)),
            ("julian", timestamp(-12219292800001)),
            ("year 10000", timestamp(253402300800000)),
            ("1e23", double(1e23)),
            ("subnormal", double(5e-324)),
            ("hundred", double(100.0)),
            ("ten million", double(1e7)),
            ("thousandth", double(0.001)),
            ("float 1.5", float_(1.5)),
        )
        + data(b"1"),
        body=b"1",
        properties=[
            ("char", "\U0001f600"),
            ("not a char", "55296"),
            ("decimal32", "-5"),
            ("decimal64", str(2**62)),
            ("described binary", "[-128]"),
            ("ints", "[1,2,-3]"),
            ("symbols", '["a","b"]'),
            ("empty array", "[]"),
            ("binary keys", '{"[0]":1,"[107]":[1]}'),
            (
                "nested",
                '["00000000-0000-0000-0000-000000000001","1970-01-01T00:00:00.000Z","\\"","s",'
                '200,"quote \\" backslash \\\\ tab \\t nul \\u0000 é",{"k":2.5}]',
            ),
            ("not UTF-8", "[-1,-2]"),
            ("year 1", '"0001-01-01T00:00:00.000Z"'),
            ("julian", '"1582-10-04T23:59:59.999Z"'),
            ("year 10000", '"10000-01-01T00:00:00.000Z"'),
            ("1e23", "1.0E23"),
            ("subnormal", "4.9E-324"),
            ("hundred", "100.0"),
            ("ten million", "1.0E7"),
            ("thousandth", "0.001"),
            ("float 1.5", "1.5"),
        ],
    ),
    Golden(
        "a map body with binary keys",
        sdk=lambda: _annotated(value_body={b"\x00": 1, b"k": [1, 2]}),
        body=None,
        amqp_body=bytes.fromhex("005377c11004a001005401a0016bc0050254015402"),
    ),
    Golden(
        "a string value body",
        sdk=lambda: _annotated(value_body="text"),
        body=None,
        amqp_body=bytes.fromhex("005377a10474657874"),
    ),
    Golden(
        "a sequence body",
        sdk=lambda: _annotated(sequence_body=[[1, "two"], [b"three"]]),
        body=None,
        amqp_body=bytes.fromhex("005376c008025401a10374776f005376c00801a0057468726565"),
    ),
    Golden(
        "no body at all",
        raw=props(("only", string("properties"))),
        body=None,
        properties=[("only", "properties")],
    ),
    Golden(
        "message properties",
        sdk=_sdk_message_properties,
        body=b"with message properties",
        system_properties=[
            ("message-id", "00000000-0000-0000-0000-000000000009"),
            ("user-id", "[0,-1]"),
            ("to", "sb://ns/hub"),
            ("subject", "subject-1"),
            ("reply-to", "sb://ns/replies"),
            ("correlation-id", "42"),
            ("content-type", "application/json"),
            ("content-encoding", "utf-8"),
            ("absolute-expiry-time", "1700000099000"),
            ("creation-time", "1700000000002"),
            ("group-id", "group-1"),
            ("group-sequence", "3"),
            ("reply-to-group-id", "group-2"),
        ],
    ),
    Golden(
        "partition key and publisher",
        sdk=lambda: _annotated(
            data_body=b"keyed",
            annotations={b"x-opt-partition-key": "device-é-42", b"x-opt-publisher": "pub-1"},
        ),
        body=b"keyed",
        partition_key="device-é-42",
        publisher="pub-1",
        # The service re-writes the partition key after its own annotations.
        system_properties=[("x-opt-publisher", "pub-1"), ("x-opt-partition-key", "device-é-42")],
    ),
    Golden(
        "an IoT Hub event",
        sdk=_sdk_iot_hub,
        body=b'{"temperature": 21.5, "humidity": 40}',
        properties=[("temperatureAlert", "true"), ("sensor", "ds18b20")],
        system_properties=[
            ("iothub-connection-device-id", "thermostat-7"),
            (
                "iothub-connection-auth-method",
                '{"scope":"device","type":"sas","issuer":"iothub","acceptingIpFilterRule":null}',
            ),
            ("iothub-connection-auth-generation-id", "638365123456789012"),
            ("iothub-enqueuedtime", '"2023-11-14T22:13:20.456Z"'),
            ("iothub-message-source", "Telemetry"),
            ("message-id", "msg-0001"),
            ("user-id", "[99,111,110,116,111,115,111,45,104,117,98]"),
            ("correlation-id", "corr-1"),
            ("content-type", "application/json"),
            ("content-encoding", "utf-8"),
        ],
    ),
)


def delivered(
    message: bytes, seq: int, offset: int = 0, enqueued_ms: int = 1_700_000_000_000
) -> bytes:
    """The message as the service delivers it (the emulator's encoding of a stored event:
    the sender's sections, the service's annotations added)."""
    from dagster_eventhub_ingest.emulator.hub import build_stored_payload

    payload, _split, _key = build_stored_payload(message, seq, offset, enqueued_ms, None)
    return payload
