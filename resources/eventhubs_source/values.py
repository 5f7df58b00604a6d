"""The text of an AMQP value in ``properties`` and ``systemProperties``: the connector's.

azure-event-hubs-spark (``EventHubsSourceProvider.toInternalRow``) turns every application
property and annotation into a string: a string stays as it is, a symbol, an unsigned number or
a char becomes its ``toString``, a binary its bytes, a decimal its bits, a described value the
value it describes; whatever is not a string by then is written by json4s
(``Serialization.write``). Here that gives, for one value at the top of a map (:func:`text`):

=================================  =======================================================
AMQP type                          text
=================================  =======================================================
string, symbol                     as is
null                               ``null``
boolean                            ``true`` / ``false``
byte ... long, ubyte ... ulong     decimal
float, double                      Java's ``Double.toString`` (a float widened to double):
                                   ``1.0E20``, ``1.0E-7``, ``0.10000000149011612``, ``-0.0``
decimal32, decimal64               the bits as a signed decimal (``Decimal32.getBits``)
binary, decimal128                 the bytes as a JSON array of signed bytes: ``[0,-1,0,-128]``
char                               the character
timestamp                          a JSON string ``"2023-11-14T22:13:20.123Z"`` (json4s's
                                   date format: UTC, Julian calendar before 1582-10-15)
list, array                        a JSON array of the elements (:func:`json_value`)
described                          the text of the value it describes
=================================  =======================================================

Where the connector loses the value, a lossless text is written instead (each named in
docs/spark_source.md): a UUID is its canonical form (json4s writes ``{}``), a map a JSON
object (``{}``), a double NaN ``"NaN"`` (json4s: ``null``), a binary, symbol, unsigned number,
char or UUID inside a list its own text (json4s: ``{}``), a string that is not UTF-8 its bytes
(Java: replacement characters), a char that is not a Unicode scalar value its code point.
Doubles follow the Java 19+ ``Double.toString`` (the shortest decimal; Java 8-18 print an
extra digit for some values, e.g. ``9.999999999999999E22`` for ``1.0E23``).

Two entry points: :func:`text` / :func:`json_value` read the value from the AMQP bytes, so the
type is exact (the reader's paths); :func:`text_of` renders a value the SDK already decoded
(the SDK's public receive), where strings, symbols and binaries are all ``bytes``: UTF-8 bytes
are taken for text, others for binary. ``_amqp_columns.c`` writes the same texts for the
scalars it takes (tests/integration/test_native_columns.py holds it to these functions).
"""

from __future__ import annotations

import math
import re
import struct
import uuid
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Context, Decimal
from typing import Any

from dagster_eventhub_ingest.resources.amqp.codec import FIXED_WIDTH

__all__ = [
    "MalformedAMQP",
    "byte_array",
    "java_date",
    "java_double",
    "json_string",
    "json_value",
    "text",
    "text_of",
]


class MalformedAMQP(ValueError):
    """Bytes that are not an AMQP value (a size past its container, an unknown constructor)."""


# -- scalars ------------------------------------------------------------------------------------

_SIGNED = [str(b - 256 if b > 127 else b) for b in range(256)]


def byte_array(data: bytes) -> str:
    """Bytes as json4s writes a Java ``byte[]``: ``[0,-1,0,-128]``."""
    return "[" + ",".join(map(_SIGNED.__getitem__, data)) + "]"


_SMALLEST_NORMAL = 2.2250738585072014e-308
_TWO_DIGITS = Context(prec=2, rounding=ROUND_HALF_EVEN)


def java_double(x: float) -> str:
    """``Double.toString(x)`` (Java 19+: the shortest decimal that reads back as ``x``), with
    json4s's spelling of what is not a number: ``"NaN"``, ``"Infinity"``, ``"-Infinity"``
    (quoted: Jackson's ``QUOTE_NON_NUMERIC_NUMBERS``)."""
    if x != x:
        return '"NaN"'
    if x == math.inf:
        return '"Infinity"'
    if x == -math.inf:
        return '"-Infinity"'
    if x == 0.0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign = "-" if x < 0 else ""
    a = -x if x < 0 else x
    mantissa, _, exp = repr(a).partition("e")
    whole, _, frac = mantissa.partition(".")
    scale = int(exp) if exp else 0
    lead = whole.lstrip("0")
    if lead:
        point = len(lead) - 1 + scale  # the exponent of the first significant digit
        digits = (lead + frac).rstrip("0") or "0"
    else:
        stripped = frac.lstrip("0")
        point = -(len(frac) - len(stripped)) - 1 + scale
        digits = stripped.rstrip("0") or "0"
    if len(digits) == 1 and a < _SMALLEST_NORMAL:
        # Java writes at least two digits, the pair closest to x: for a subnormal that is not
        # always the one digit and a zero.
        pair = _TWO_DIGITS.plus(Decimal(a))
        if float(pair) == a:
            sig = pair.as_tuple()
            digits = "".join(map(str, sig.digits)).rstrip("0") or "0"
            point = len(sig.digits) - 1 + int(sig.exponent)
    if 1e-3 <= a < 1e7:
        if point >= 0:
            return f"{sign}{digits[: point + 1].ljust(point + 1, '0')}.{digits[point + 1 :] or '0'}"
        return f"{sign}0.{'0' * (-point - 1)}{digits}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{point}"


#: 1582-10-15T00:00:00Z: Java's GregorianCalendar uses the Julian calendar before it.
_GREGORIAN_CUTOVER_MS = -12_219_292_800_000


def java_date(ms: int) -> str:
    """A timestamp as json4s's ``DefaultFormats`` writes a ``java.util.Date`` (without the
    quotes): ``yyyy-MM-dd'T'HH:mm:ss.SSS'Z'`` in UTC, the year of the era (``0001`` for 1 BC),
    the Julian calendar before 1582-10-15."""
    days, rest = divmod(ms, 86_400_000)
    if ms >= _GREGORIAN_CUTOVER_MS:
        # Howard Hinnant's civil_from_days (proleptic Gregorian).
        z = days + 719_468
        era = z // 146_097
        doe = z - era * 146_097
        yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
        doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
        mp = (5 * doy + 2) // 153
        day = doy - (153 * mp + 2) // 5 + 1
        month = mp + 3 if mp < 10 else mp - 9
        year = yoe + era * 400 + (month <= 2)
    else:
        # The Julian calendar from the Julian day number.
        c = days + 2_440_588 + 32_082
        d = (4 * c + 3) // 1461
        e = c - 1461 * d // 4
        m = (5 * e + 2) // 153
        day = e - (153 * m + 2) // 5 + 1
        month = m + 3 - 12 * (m // 10)
        year = d - 4800 + m // 10
    if year <= 0:
        year = 1 - year
    hour, rest = divmod(rest, 3_600_000)
    minute, rest = divmod(rest, 60_000)
    second, milli = divmod(rest, 1000)
    return f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}.{milli:03d}Z"


_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}
_NEEDS_ESCAPE = re.compile(r'[\x00-\x1f"\\]')


def _escape(match: re.Match[str]) -> str:
    c = match.group()
    return _ESCAPES.get(c) or f"\\u{ord(c):04X}"


def json_string(s: str) -> str:
    """``s`` as a JSON string the way Jackson writes it (``\\u001F``: upper-case hex; ``/`` and
    non-ASCII characters as they are)."""
    if _NEEDS_ESCAPE.search(s) is None:
        return '"' + s + '"'
    return '"' + _NEEDS_ESCAPE.sub(_escape, s) + '"'


def _char(cp: int) -> str | None:
    """The character of a code point, or None when it is not a Unicode scalar value."""
    if 0 <= cp <= 0x10FFFF and not 0xD800 <= cp <= 0xDFFF:
        return chr(cp)
    return None


# -- values read from AMQP bytes ----------------------------------------------------------------

_u16 = struct.Struct(">H").unpack_from
_i16 = struct.Struct(">h").unpack_from
_u32 = struct.Struct(">I").unpack_from
_i32 = struct.Struct(">i").unpack_from
_u64 = struct.Struct(">Q").unpack_from
_i64 = struct.Struct(">q").unpack_from
_f32 = struct.Struct(">f").unpack_from
_f64 = struct.Struct(">d").unpack_from

_MAX_DEPTH = 64


def _need(b: bytes, end: int, limit: int) -> None:
    if end > limit:
        raise MalformedAMQP("a value runs past the end of its container")


def _scalar(c: int, b: bytes, i: int, end: int) -> tuple[Any, int]:
    """A fixed-width value (no compound, no variable width): its Python value, the index after
    it. ``bool`` for booleans, ``int`` for integers, decimal bits and timestamps, ``float``,
    ``str`` (a char), ``uuid.UUID``; None for null. Raises :class:`MalformedAMQP`."""
    width = FIXED_WIDTH[c]
    j = i + width
    _need(b, j, end)
    if c == 0x40:
        return None, j
    if c == 0x41:
        return True, j
    if c == 0x42:
        return False, j
    if c == 0x56:
        if b[i] > 1:
            raise MalformedAMQP(f"boolean byte 0x{b[i]:02x}")
        return b[i] == 1, j
    if c in (0x43, 0x44, 0x45):
        return (0 if c != 0x45 else []), j
    if c in (0x50, 0x52, 0x53):
        return b[i], j
    if c in (0x51, 0x54, 0x55):
        v = b[i]
        return (v - 256 if v > 127 else v), j
    if c == 0x60:
        return _u16(b, i)[0], j
    if c == 0x61:
        return _i16(b, i)[0], j
    if c == 0x70:
        return _u32(b, i)[0], j
    if c in (0x71, 0x74):
        return _i32(b, i)[0], j
    if c == 0x80:
        return _u64(b, i)[0], j
    if c in (0x81, 0x83, 0x84):
        return _i64(b, i)[0], j
    if c == 0x72:
        return _f32(b, i)[0], j
    if c == 0x82:
        return _f64(b, i)[0], j
    if c == 0x73:
        return _u32(b, i)[0], j
    if c == 0x98:
        return uuid.UUID(bytes=b[i:j]), j
    return b[i:j], j  # 0x94 decimal128: its bytes


def _variable(c: int, b: bytes, i: int, end: int) -> tuple[bytes, int]:
    """The bytes of a binary, string or symbol (constructor ``c`` read), the index after it."""
    if c < 0xB0:
        _need(b, i + 1, end)
        n = b[i]
        i += 1
    else:
        _need(b, i + 4, end)
        n = _u32(b, i)[0]
        i += 4
    j = i + n
    _need(b, j, end)
    return b[i:j], j


def compound_head(c: int, b: bytes, i: int, end: int) -> tuple[int, int, int]:
    """A list, map or array header (constructor ``c`` read): the index of its first element
    (for an array: its element constructor), its count and where it must end."""
    if c in (0xC0, 0xC1, 0xE0):
        _need(b, i + 2, end)
        size, count, first = b[i], b[i + 1], i + 2
        stop = i + 1 + size
        if size < 1:
            raise MalformedAMQP("a compound size below its count field")
    else:
        _need(b, i + 8, end)
        size, count = _u32(b, i)[0], _u32(b, i + 4)[0]
        first, stop = i + 8, i + 4 + size
        if size < 4:
            raise MalformedAMQP("a compound size below its count field")
    _need(b, stop, end)
    if c in (0xC1, 0xD1) and count & 1:
        raise MalformedAMQP("a map with an odd count of keys and values")
    return first, count, stop


def _utf8(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def text(b: bytes, i: int, end: int, depth: int = 0) -> tuple[str, int]:
    """The connector's text of the AMQP value at ``b[i]`` (not past ``end``), the index after
    it. Raises :class:`MalformedAMQP`."""
    if i >= end:
        raise MalformedAMQP("a value is missing")
    c = b[i]
    return _typed_text(c, b, i + 1, end, depth)


def _typed_text(c: int, b: bytes, i: int, end: int, depth: int) -> tuple[str, int]:
    if c in (0xA1, 0xB1, 0xA3, 0xB3):
        raw, j = _variable(c, b, i, end)
        s = _utf8(raw)
        return (byte_array(raw) if s is None else s), j
    if c in (0xA0, 0xB0):
        raw, j = _variable(c, b, i, end)
        return byte_array(raw), j
    if c in FIXED_WIDTH:
        v, j = _scalar(c, b, i, end)
        return _scalar_text(c, v), j
    if c == 0x00:
        if depth > _MAX_DEPTH:
            raise MalformedAMQP("values nested too deep")
        j = skip(b, i, end, depth + 1)  # the descriptor: dropped, as the connector does
        return text(b, j, end, depth + 1)
    return _typed_json(c, b, i, end, depth)


def _scalar_text(c: int, v: Any) -> str:
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if c == 0x72 or c == 0x82:
        return java_double(v)
    if c == 0x83:
        return '"' + java_date(v) + '"'
    if c == 0x73:
        ch = _char(v)
        return str(v) if ch is None else ch
    if c == 0x94:
        return byte_array(v)
    if c == 0x45:
        return "[]"
    return str(v)  # integers, decimal bits, UUIDs


def json_value(b: bytes, i: int, end: int, depth: int = 0) -> tuple[str, int]:
    """The AMQP value at ``b[i]`` as JSON inside a list, array or map: strings, symbols, chars,
    UUIDs and timestamps quoted, the rest as :func:`text` writes it. Raises
    :class:`MalformedAMQP`."""
    if i >= end:
        raise MalformedAMQP("a value is missing")
    return _typed_json(b[i], b, i + 1, end, depth)


def _typed_json(c: int, b: bytes, i: int, end: int, depth: int) -> tuple[str, int]:
    if c in (0xA1, 0xB1, 0xA3, 0xB3):
        raw, j = _variable(c, b, i, end)
        s = _utf8(raw)
        return (byte_array(raw) if s is None else json_string(s)), j
    if c in (0xA0, 0xB0):
        raw, j = _variable(c, b, i, end)
        return byte_array(raw), j
    if c in FIXED_WIDTH:
        v, j = _scalar(c, b, i, end)
        if c == 0x73:
            ch = _char(v)
            return (str(v) if ch is None else json_string(ch)), j
        if c == 0x98:
            return '"' + str(v) + '"', j
        return _scalar_text(c, v), j
    if depth > _MAX_DEPTH:
        raise MalformedAMQP("values nested too deep")
    if c == 0x00:
        j = skip(b, i, end, depth + 1)
        return json_value(b, j, end, depth + 1)
    if c in (0xC0, 0xD0):
        first, count, stop = compound_head(c, b, i, end)
        items = []
        for _ in range(count):
            item, first = json_value(b, first, stop, depth + 1)
            items.append(item)
        return "[" + ",".join(items) + "]", _at_end(first, stop)
    if c in (0xC1, 0xD1):
        first, count, stop = compound_head(c, b, i, end)
        pairs = []
        for _ in range(count // 2):
            key, first = text(b, first, stop, depth + 1)
            value, first = json_value(b, first, stop, depth + 1)
            pairs.append(json_string(key) + ":" + value)
        return "{" + ",".join(pairs) + "}", _at_end(first, stop)
    if c in (0xE0, 0xF0):
        first, count, stop = compound_head(c, b, i, end)
        if not count:  # pyamqp writes an empty array without its element constructor
            return "[]", stop
        _need(b, first + 1, stop)
        element = b[first]
        first += 1
        if element == 0x00:  # described elements: one descriptor for all, then their type
            first = skip(b, first, stop, depth + 1)
            _need(b, first + 1, stop)
            element = b[first]
            first += 1
        items = []
        for _ in range(count):
            item, first = _typed_json(element, b, first, stop, depth + 1)
            items.append(item)
        return "[" + ",".join(items) + "]", _at_end(first, stop)
    raise MalformedAMQP(f"unknown AMQP constructor 0x{c:02x}")


def _at_end(at: int, stop: int) -> int:
    if at != stop:
        raise MalformedAMQP("a compound's elements do not fill its size")
    return stop


def skip(b: bytes, i: int, end: int, depth: int = 0) -> int:
    """The index after the AMQP value at ``b[i]``, checked as :func:`json_value` checks it."""
    if i >= end:
        raise MalformedAMQP("a value is missing")
    return _typed_json(b[i], b, i + 1, end, depth)[1]


# -- values the SDK decoded ---------------------------------------------------------------------


def text_of(value: Any) -> str:
    """The connector's text of a value as pyamqp decodes it (the SDK's public receive).

    pyamqp gives strings, symbols and binaries alike as ``bytes`` and timestamps of
    annotations as ``int``: UTF-8 bytes are written as text, other bytes as binary.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        s = _utf8(raw)
        return byte_array(raw) if s is None else s
    if isinstance(value, list | tuple | dict):
        return _json_of(value)
    return _scalar_of(value, quote=False)


def _scalar_of(value: Any, *, quote: bool) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float):
        return java_double(value)
    if isinstance(value, datetime):
        ms = int(value.timestamp() * 1000)
        return '"' + java_date(ms) + '"'
    if isinstance(value, uuid.UUID):
        return f'"{value}"' if quote else str(value)
    if isinstance(value, Decimal):
        return str(value)
    return str(value)


def _json_of(value: Any) -> str:
    if isinstance(value, str):
        return json_string(value)
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        s = _utf8(raw)
        return byte_array(raw) if s is None else json_string(s)
    if isinstance(value, list | tuple):
        return "[" + ",".join(_json_of(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{"
            + ",".join(json_string(text_of(k)) + ":" + _json_of(v) for k, v in value.items())
            + "}"
        )
    return _scalar_of(value, quote=True)
