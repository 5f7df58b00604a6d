"""AMQP 1.0 type system: the project's own encoder and decoder.

One codec for both ends the project speaks: the reader's receiver (``resources/amqp/``, the client
side) and the emulator (``emulator/``, the server side). Independent of the Azure SDK's private
codec on purpose: a bug shared with the SDK would be invisible in tests, which drive the emulator
with the real SDK (tests/unit/test_emulator_codec.py cross-checks the two codecs value by value).
Python values map to AMQP types as follows (encode):

* ``None`` -> null, ``bool`` -> boolean, ``int`` -> long, ``float`` -> double, ``str`` -> string,
  ``bytes`` -> binary, ``uuid.UUID`` -> uuid, ``list`` -> list, ``dict`` -> map;
* the marker subclasses :class:`Symbol`, :class:`UByte`, :class:`UShort`, :class:`UInt`,
  :class:`ULong`, :class:`Int`, :class:`Timestamp` pick the exact AMQP type;
* :class:`Described` and :class:`Array` build described values and arrays.

Decoding returns the same Python types (symbols as :class:`Symbol`, timestamps as
:class:`Timestamp`, unsigned and narrow integers as plain ``int``). Lists are always written as
``list8``/``list32`` with every field present (never ``list0``, never trailing nulls dropped),
because the Azure SDK reads performative fields by position.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = [
    "FIXED_WIDTH",
    "AMQPDecodeError",
    "Array",
    "Described",
    "Int",
    "Symbol",
    "Timestamp",
    "UByte",
    "UInt",
    "ULong",
    "UShort",
    "decode",
    "encode",
    "encode_into",
    "skip",
    "split_list",
]


class AMQPDecodeError(ValueError):
    """Raised when bytes are not a valid AMQP encoding (the peer gets ``amqp:decode-error``)."""


class Symbol(str):
    """An AMQP symbol (ASCII), e.g. error conditions and annotation keys."""

    __slots__ = ()


class Timestamp(int):
    """An AMQP timestamp: milliseconds since the Unix epoch."""

    __slots__ = ()


class UByte(int):
    """An AMQP ubyte."""

    __slots__ = ()


class UShort(int):
    """An AMQP ushort."""

    __slots__ = ()


class UInt(int):
    """An AMQP uint."""

    __slots__ = ()


class ULong(int):
    """An AMQP ulong (descriptors are encoded as small ulong ``0x53`` when below 256)."""

    __slots__ = ()


class Int(int):
    """An AMQP int (32-bit signed)."""

    __slots__ = ()


class Described(NamedTuple):
    """A described value: ``descriptor`` (usually a :class:`ULong` code) and its ``value``."""

    descriptor: Any
    value: Any


class Array(NamedTuple):
    """An AMQP array: every element has the type ``element`` (Symbol, str, bytes, int, ...)."""

    element: type
    items: list[Any]


_B = struct.Struct(">B")
_b = struct.Struct(">b")
_H = struct.Struct(">H")
_h = struct.Struct(">h")
_I = struct.Struct(">I")
_i = struct.Struct(">i")
_Q = struct.Struct(">Q")
_q = struct.Struct(">q")
_f = struct.Struct(">f")
_d = struct.Struct(">d")
_BI = struct.Struct(">BI")
_BQ = struct.Struct(">BQ")
_Bq = struct.Struct(">Bq")
_Bd = struct.Struct(">Bd")
_BB = struct.Struct(">BB")
_BII = struct.Struct(">BII")


# ---------------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------------


def _enc_uint(out: bytearray, v: int) -> None:
    if v == 0:
        out.append(0x43)
    elif v < 256:
        out += _BB.pack(0x52, v)
    else:
        out += _BI.pack(0x70, v)


def _enc_ulong(out: bytearray, v: int) -> None:
    if v == 0:
        out.append(0x44)
    elif v < 256:
        out += _BB.pack(0x53, v)
    else:
        out += _BQ.pack(0x80, v)


def _enc_long(out: bytearray, v: int) -> None:
    if -128 <= v <= 127:
        out += b"\x55" + _b.pack(v)
    else:
        out += _Bq.pack(0x81, v)


def _enc_variable(out: bytearray, small: int, large: int, raw: bytes) -> None:
    n = len(raw)
    if n < 256:
        out += _BB.pack(small, n)
    else:
        out += _BI.pack(large, n)
    out += raw


def _enc_compound(out: bytearray, small: int, large: int, count: int, body: bytes) -> None:
    # size counts the count field plus the body
    if len(body) + 1 < 256 and count < 256:
        out += _BB.pack(small, len(body) + 1)
        out.append(count)
    else:
        out += _BII.pack(large, len(body) + 4, count)
    out += body


def encode_into(out: bytearray, v: Any) -> None:
    """Append the AMQP encoding of ``v`` to ``out`` (see the module docstring for the mapping)."""
    if v is None:
        out.append(0x40)
    elif v is True:
        out.append(0x41)
    elif v is False:
        out.append(0x42)
    elif isinstance(v, int):
        cls = type(v)
        if cls is int:
            _enc_long(out, v)
        elif cls is UInt:
            _enc_uint(out, v)
        elif cls is ULong:
            _enc_ulong(out, v)
        elif cls is Timestamp:
            out += _Bq.pack(0x83, v)
        elif cls is UByte:
            out += _BB.pack(0x50, v)
        elif cls is UShort:
            out += b"\x60" + _H.pack(v)
        elif cls is Int:
            if -128 <= v <= 127:
                out += b"\x54" + _b.pack(v)
            else:
                out += b"\x71" + _i.pack(v)
        else:
            _enc_long(out, int(v))
    elif isinstance(v, str):
        if type(v) is Symbol:
            _enc_variable(out, 0xA3, 0xB3, v.encode("ascii"))
        else:
            _enc_variable(out, 0xA1, 0xB1, v.encode("utf-8"))
    elif isinstance(v, (bytes, bytearray, memoryview)):
        _enc_variable(out, 0xA0, 0xB0, bytes(v))
    elif isinstance(v, Described):
        out.append(0x00)
        encode_into(out, v.descriptor)
        encode_into(out, v.value)
    elif isinstance(v, Array):
        _enc_array(out, v)
    elif isinstance(v, (list, tuple)):
        body = bytearray()
        for item in v:
            encode_into(body, item)
        _enc_compound(out, 0xC0, 0xD0, len(v), bytes(body))
    elif isinstance(v, dict):
        body = bytearray()
        for key, value in v.items():
            encode_into(body, key)
            encode_into(body, value)
        _enc_compound(out, 0xC1, 0xD1, 2 * len(v), bytes(body))
    elif isinstance(v, float):
        out += _Bd.pack(0x82, v)
    elif isinstance(v, uuid.UUID):
        out.append(0x98)
        out += v.bytes
    else:
        raise TypeError(f"cannot encode {type(v).__name__} as AMQP")


def _enc_array(out: bytearray, arr: Array) -> None:
    element, items = arr.element, arr.items
    body = bytearray()
    if element in (str, Symbol, bytes):
        raws = [
            x.encode("ascii")
            if element is Symbol
            else x.encode("utf-8")
            if element is str
            else bytes(x)
            for x in items
        ]
        small = all(len(r) < 256 for r in raws)
        codes = {str: (0xA1, 0xB1), Symbol: (0xA3, 0xB3), bytes: (0xA0, 0xB0)}[element]
        body.append(codes[0] if small else codes[1])
        for r in raws:
            body += _B.pack(len(r)) if small else _I.pack(len(r))
            body += r
    elif element in (int, Timestamp):
        body.append(0x81 if element is int else 0x83)
        for x in items:
            body += _q.pack(x)
    elif element is UInt:
        body.append(0x70)
        for x in items:
            body += _I.pack(x)
    elif element is ULong:
        body.append(0x80)
        for x in items:
            body += _Q.pack(x)
    else:
        raise TypeError(f"cannot encode an AMQP array of {element.__name__}")
    if len(body) + 1 < 256 and len(items) < 256:
        out += _BB.pack(0xE0, len(body) + 1)
        out.append(len(items))
    else:
        out += _BII.pack(0xF0, len(body) + 4, len(items))
    out += body


def encode(v: Any) -> bytes:
    """Return the AMQP encoding of ``v``."""
    out = bytearray()
    encode_into(out, v)
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------

Decoder = Callable[[bytes, int], tuple[Any, int]]

#: Bytes after the constructor of each fixed-width type (arrays hold their elements so);
#: variable-width and compound types are not in it.
FIXED_WIDTH: dict[int, int] = {
    0x40: 0, 0x41: 0, 0x42: 0, 0x43: 0, 0x44: 0, 0x45: 0,
    0x50: 1, 0x51: 1, 0x52: 1, 0x53: 1, 0x54: 1, 0x55: 1, 0x56: 1,
    0x60: 2, 0x61: 2,
    0x70: 4, 0x71: 4, 0x72: 4, 0x73: 4, 0x74: 4,
    0x80: 8, 0x81: 8, 0x82: 8, 0x83: 8, 0x84: 8,
    0x94: 16, 0x98: 16,
}  # fmt: skip


def skip(data: bytes, pos: int) -> int:
    """Return the position just after the encoded value starting at ``pos``."""
    try:
        code = data[pos]
        if code == 0x00:
            pos = skip(data, pos + 1)
            return skip(data, pos)
        width = FIXED_WIDTH.get(code)
        if width is not None:
            end = pos + 1 + width
        elif code in (0xA0, 0xA1, 0xA3, 0xC0, 0xC1, 0xE0):
            end = pos + 2 + data[pos + 1]
        elif code in (0xB0, 0xB1, 0xB3, 0xD0, 0xD1, 0xF0):
            end = pos + 5 + _I.unpack_from(data, pos + 1)[0]
        else:
            raise AMQPDecodeError(f"unknown AMQP constructor 0x{code:02x} at {pos}")
    except IndexError as exc:
        raise AMQPDecodeError(f"truncated AMQP value at {pos}") from exc
    if end > len(data):
        raise AMQPDecodeError(f"truncated AMQP value at {pos}")
    return end


def _fixed(
    unpacker: struct.Struct, width: int, wrap: Callable[[Any], Any] | None = None
) -> Decoder:
    def dec(data: bytes, pos: int) -> tuple[Any, int]:
        value = unpacker.unpack_from(data, pos)[0]
        return (wrap(value) if wrap else value), pos + width

    return dec


def _const(value: Any) -> Decoder:
    def dec(data: bytes, pos: int) -> tuple[Any, int]:
        return value, pos

    return dec


def _dec_empty_list(data: bytes, pos: int) -> tuple[Any, int]:
    return [], pos


def _dec_bool(data: bytes, pos: int) -> tuple[Any, int]:
    return data[pos] != 0, pos + 1


def _var(small: bool, kind: str) -> Decoder:
    def dec(data: bytes, pos: int) -> tuple[Any, int]:
        if small:
            n = data[pos]
            pos += 1
        else:
            n = _I.unpack_from(data, pos)[0]
            pos += 4
        raw = data[pos : pos + n]
        if len(raw) != n:
            raise AMQPDecodeError("truncated AMQP string/binary")
        if kind == "bin":
            return bytes(raw), pos + n
        text = bytes(raw).decode("utf-8" if kind == "str" else "ascii")
        return (Symbol(text) if kind == "sym" else text), pos + n

    return dec


def _dec_uuid(data: bytes, pos: int) -> tuple[Any, int]:
    return uuid.UUID(bytes=bytes(data[pos : pos + 16])), pos + 16


def _dec_list(small: bool) -> Decoder:
    def dec(data: bytes, pos: int) -> tuple[Any, int]:
        if small:
            size, count = data[pos], data[pos + 1]
            start, end = pos + 2, pos + 1 + size
        else:
            size, count = _I.unpack_from(data, pos)[0], _I.unpack_from(data, pos + 4)[0]
            start, end = pos + 8, pos + 4 + size
        values = []
        p = start
        for _ in range(count):
            v, p = _DECODERS[data[p]](data, p + 1)
            values.append(v)
        if p != end:
            raise AMQPDecodeError("AMQP list size does not match its elements")
        return values, end

    return dec


def _dec_map(small: bool) -> Decoder:
    def dec(data: bytes, pos: int) -> tuple[Any, int]:
        values, end = _dec_list(small)(data, pos)
        if len(values) % 2:
            raise AMQPDecodeError("AMQP map with an odd number of elements")
        return dict(zip(values[::2], values[1::2], strict=True)), end

    return dec


def _dec_array(small: bool) -> Decoder:
    def dec(data: bytes, pos: int) -> tuple[Any, int]:
        if small:
            size, count = data[pos], data[pos + 1]
            p, end = pos + 2, pos + 1 + size
        else:
            size, count = _I.unpack_from(data, pos)[0], _I.unpack_from(data, pos + 4)[0]
            p, end = pos + 8, pos + 4 + size
        if count == 0:
            return [], end
        code = data[p]
        p += 1
        descriptor = None
        if code == 0x00:  # described element type: descriptor, then the element constructor
            descriptor, p = decode(data, p)
            code = data[p]
            p += 1
        element_decoder = _DECODERS[code]
        values = []
        for _ in range(count):
            v, p = element_decoder(data, p)
            values.append(Described(descriptor, v) if descriptor is not None else v)
        if p != end:
            raise AMQPDecodeError("AMQP array size does not match its elements")
        return values, end

    return dec


def _dec_described(data: bytes, pos: int) -> tuple[Any, int]:
    descriptor, pos = decode(data, pos)
    value, pos = decode(data, pos)
    return Described(descriptor, value), pos


def _unknown(code: int) -> Decoder:
    def dec(data: bytes, pos: int) -> tuple[Any, int]:
        raise AMQPDecodeError(f"unsupported AMQP constructor 0x{code:02x}")

    return dec


_DECODERS: list[Decoder] = [_unknown(c) for c in range(256)]
_DECODERS[0x00] = _dec_described
_DECODERS[0x40] = _const(None)
_DECODERS[0x41] = _const(True)
_DECODERS[0x42] = _const(False)
_DECODERS[0x43] = _const(0)
_DECODERS[0x44] = _const(0)
_DECODERS[0x45] = _dec_empty_list
_DECODERS[0x50] = _fixed(_B, 1)
_DECODERS[0x51] = _fixed(_b, 1)
_DECODERS[0x52] = _fixed(_B, 1)
_DECODERS[0x53] = _fixed(_B, 1)
_DECODERS[0x54] = _fixed(_b, 1)
_DECODERS[0x55] = _fixed(_b, 1)
_DECODERS[0x56] = _dec_bool
_DECODERS[0x60] = _fixed(_H, 2)
_DECODERS[0x61] = _fixed(_h, 2)
_DECODERS[0x70] = _fixed(_I, 4)
_DECODERS[0x71] = _fixed(_i, 4)
_DECODERS[0x72] = _fixed(_f, 4)
_DECODERS[0x73] = _fixed(_I, 4, chr)
_DECODERS[0x80] = _fixed(_Q, 8)
_DECODERS[0x81] = _fixed(_q, 8)
_DECODERS[0x82] = _fixed(_d, 8)
_DECODERS[0x83] = _fixed(_q, 8, Timestamp)
_DECODERS[0x98] = _dec_uuid
_DECODERS[0xA0] = _var(True, "bin")
_DECODERS[0xA1] = _var(True, "str")
_DECODERS[0xA3] = _var(True, "sym")
_DECODERS[0xB0] = _var(False, "bin")
_DECODERS[0xB1] = _var(False, "str")
_DECODERS[0xB3] = _var(False, "sym")
_DECODERS[0xC0] = _dec_list(True)
_DECODERS[0xC1] = _dec_map(True)
_DECODERS[0xD0] = _dec_list(False)
_DECODERS[0xD1] = _dec_map(False)
_DECODERS[0xE0] = _dec_array(True)
_DECODERS[0xF0] = _dec_array(False)


def decode(data: bytes, pos: int = 0) -> tuple[Any, int]:
    """Decode one value at ``pos``; return it and the position after it."""
    try:
        return _DECODERS[data[pos]](data, pos + 1)
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise AMQPDecodeError(f"malformed AMQP value at {pos}: {exc}") from exc


def split_list(data: bytes, pos: int) -> tuple[list[tuple[int, int]], int]:
    """Return the raw ``(start, end)`` span of each element of the list at ``pos``, and its end.

    Used to echo a peer's source/target verbatim and to copy message sections unchanged. A map
    works too: its spans alternate key, value.
    """
    code = data[pos]
    if code == 0x45:
        return [], pos + 1
    if code in (0xC0, 0xC1):
        count, p, end = data[pos + 2], pos + 3, pos + 2 + data[pos + 1]
    elif code in (0xD0, 0xD1):
        count = _I.unpack_from(data, pos + 5)[0]
        p, end = pos + 9, pos + 5 + _I.unpack_from(data, pos + 1)[0]
    else:
        raise AMQPDecodeError(f"expected an AMQP list or map at {pos}, got 0x{code:02x}")
    spans = []
    for _ in range(count):
        q = skip(data, p)
        spans.append((p, q))
        p = q
    return spans, end
