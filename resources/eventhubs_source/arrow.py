"""Arrow arrays from Python lists, built from their buffers (no pandas in Spark's workers).

``pa.array`` on a Python list first asks whether the list is a pandas object, and that question
imports pandas: ~0.26 s of CPU and ~44 MB of memory in every Python worker of every executor,
on its first batch, for a module the reader never uses. The builders here lay the buffers out
as the Arrow format defines them (a validity bitmap, 32-bit offsets, the values) and hand them
to ``pa.Array.from_buffers``, which asks nothing; per row they cost what ``pa.array`` costs.

Only the types the ``eventhubs`` schema uses: 64-bit integers and timestamps, strings, binary,
and maps of string to string.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from itertools import accumulate
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "concat_batches",
    "int64_array",
    "map_array",
    "map_array_of_buffers",
    "repeated_string",
    "string_array_of_buffers",
    "varbinary_array",
]

#: The last offset a 32-bit offsets buffer holds.
_MAX_OFFSET = 2**31 - 1


def _validity(values: Sequence[Any]) -> tuple[pa.Buffer | None, int]:
    """The validity bitmap of ``values`` (None when none is null) and their null count."""
    import pyarrow as pa

    nulls = values.count(None)
    if not nulls:
        return None, 0
    bits = bytearray((len(values) + 7) // 8)
    for i, value in enumerate(values):
        if value is not None:
            bits[i >> 3] |= 1 << (i & 7)
    return pa.py_buffer(bits), nulls


def _offsets(lengths: Iterable[int], n: int) -> bytes:
    """The ``n + 1`` 32-bit offsets of values of ``lengths`` (``struct`` packs a list of ints
    fastest: ~7 ns each, ``array`` from an iterator ~45)."""
    return struct.pack(f"<{n + 1}i", *accumulate(lengths, initial=0))


def int64_array(values: Sequence[int | None], type: pa.DataType) -> pa.Array:
    """``values`` as an array of ``type``: a 64-bit integer or timestamp type."""
    import pyarrow as pa

    n = len(values)
    valid, nulls = _validity(values)
    ints = values if not nulls else [0 if v is None else v for v in values]
    data = pa.py_buffer(struct.pack(f"<{n}q", *ints))
    return pa.Array.from_buffers(type, n, [valid, data], null_count=nulls)


def varbinary_array(
    values: Sequence[bytes | None] | Sequence[str | None], type: pa.DataType
) -> pa.Array:
    """``values`` as an array of ``type``: ``pa.binary()`` (bytes) or ``pa.string()`` (str)."""
    import pyarrow as pa

    n = len(values)
    valid, nulls = _validity(values)
    if nulls == n and n:
        return pa.nulls(n, type)
    text = pa.types.is_string(type)
    blank = "" if text else b""  # a null's slot in the values buffer: empty
    filled = values if not nulls else [blank if v is None else v for v in values]
    items: Sequence[bytes | str]
    if text:
        texts = cast("Sequence[str]", filled)
        joined = "".join(texts)
        if joined.isascii():  # one encode, and every character is one byte
            data, items = joined.encode("ascii"), texts
        else:
            encoded = [t.encode("utf-8") for t in texts]
            data, items = b"".join(encoded), encoded
    else:
        blobs = cast("Sequence[bytes]", filled)
        data, items = b"".join(blobs), blobs
    if len(data) > _MAX_OFFSET:  # the reader's batches end long before (_read._BATCH_BYTES)
        raise ValueError(f"{len(data)} bytes of values: past the 2 GiB of 32-bit offsets")
    offsets = pa.py_buffer(_offsets(map(len, items), n))
    return pa.Array.from_buffers(type, n, [valid, offsets, pa.py_buffer(data)], null_count=nulls)


def repeated_string(value: str, n: int) -> pa.Array:
    """``n`` times the string ``value`` (one value, repeated by Arrow)."""
    import pyarrow as pa

    return pa.repeat(varbinary_array([value], pa.string())[0], n)


def map_array(values: Sequence[Sequence[tuple[str, str | None]]], type: pa.MapType) -> pa.Array:
    """Lists of (key, value) pairs as a map array of ``type`` (string keys, string values)."""
    import pyarrow as pa

    n = len(values)
    if not any(values):  # the usual event: no properties
        offsets = bytes(4 * (n + 1))
        keys: list[str] = []
        items: list[str | None] = []
    else:
        offsets = _offsets(map(len, values), n)
        keys = [k for entries in values for k, _ in entries]
        items = [v for entries in values for _, v in entries]
    return pa.MapArray.from_arrays(
        pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(offsets)]),
        varbinary_array(keys, type.key_type),
        varbinary_array(items, type.item_type),
        type=type,
    )


# -- from buffers laid out elsewhere (the native step, fastpath/_amqp_columns.c) --


def string_array_of_buffers(
    n: int, offsets: bytes, data: bytes, valid: bytes | None, type: pa.DataType | None = None
) -> pa.Array:
    """``n`` strings (or values of ``type``: binary) from their 32-bit offsets, values and
    validity bitmap (None: none is null)."""
    import pyarrow as pa

    return pa.Array.from_buffers(
        type or pa.string(),
        n,
        [None if valid is None else pa.py_buffer(valid), pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=0 if valid is None else -1,
    )


def map_array_of_buffers(n: int, buffers: tuple[bytes, ...], type: pa.MapType) -> pa.Array:
    """``n`` maps of string to string from (offsets, key offsets, keys, value offsets, values,
    the values' validity or None)."""
    import pyarrow as pa

    offsets, key_offsets, keys, value_offsets, values, valid = buffers
    count = (len(key_offsets) >> 2) - 1
    return pa.MapArray.from_arrays(
        pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(offsets)]),
        string_array_of_buffers(count, key_offsets, keys, None),
        string_array_of_buffers(count, value_offsets, values, valid),
        type=type,
    )


def concat_batches(pieces: Sequence[pa.RecordBatch]) -> pa.RecordBatch:
    """One record batch of ``pieces`` (same schema), in order. ``pa.concat_batches`` where the
    installed pyarrow has it (19 and later); through a table's combined chunks before."""
    import pyarrow as pa

    concat = getattr(pa, "concat_batches", None)
    if concat is not None:
        return cast("pa.RecordBatch", concat(list(pieces)))
    table = pa.Table.from_batches(list(pieces)).combine_chunks()
    batches = table.to_batches()
    return batches[0] if len(batches) == 1 else pieces[0].slice(0, 0)
