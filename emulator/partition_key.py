"""Which partition a keyed event lands in: the SDK's own resolver (lookup3), bit for bit."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["lookup3", "partition_for_key"]


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & 0xFFFFFFFF


def lookup3(data: bytes | Sequence[int]) -> tuple[int, int]:
    """Bob Jenkins' lookup3 ``hashlittle2`` with zero seeds: ``(c, b)``.

    ``data`` is bytes, or any sequence of ints taken as the "bytes" (the SDK's resolver feeds
    it the code points of the key string, which may exceed 255; the sums are mod 2**32).
    """
    m = 0xFFFFFFFF
    a = b = c = (0xDEADBEEF + len(data)) & m
    i, size = 0, len(data)

    def u32(j: int, n: int = 4) -> int:
        v = 0
        for k in range(n):
            v += data[j + k] << (8 * k)
        return v & m

    while size > 12:
        a = (a + u32(i)) & m
        b = (b + u32(i + 4)) & m
        c = (c + u32(i + 8)) & m
        a = (a - c) & m
        a ^= _rot(c, 4)
        c = (c + b) & m
        b = (b - a) & m
        b ^= _rot(a, 6)
        a = (a + c) & m
        c = (c - b) & m
        c ^= _rot(b, 8)
        b = (b + a) & m
        a = (a - c) & m
        a ^= _rot(c, 16)
        c = (c + b) & m
        b = (b - a) & m
        b ^= _rot(a, 19)
        a = (a + c) & m
        c = (c - b) & m
        c ^= _rot(b, 4)
        b = (b + a) & m
        i += 12
        size -= 12
    if size == 0:
        return c, b
    a = (a + u32(i, min(size, 4))) & m
    if size > 4:
        b = (b + u32(i + 4, min(size - 4, 4))) & m
    if size > 8:
        c = (c + u32(i + 8, size - 8)) & m
    c ^= b
    c = (c - _rot(b, 14)) & m
    a ^= c
    a = (a - _rot(c, 11)) & m
    b ^= a
    b = (b - _rot(a, 25)) & m
    c ^= b
    c = (c - _rot(b, 16)) & m
    a ^= c
    a = (a - _rot(c, 4)) & m
    b ^= a
    b = (b - _rot(a, 14)) & m
    c ^= b
    c = (c - _rot(b, 24)) & m
    return c, b


def partition_for_key(partition_key: str, partition_count: int) -> int:
    """Partition index for a key, exactly as the SDK's own resolver computes it.

    azure-eventhub's ``_buffered_producer/_partition_resolver.py``: lookup3 over the key's code
    points, ``(c ^ b)`` folded to a signed 16-bit value (an empty key is 0), then Python's
    ``%`` (never negative). So a keyed send lands where the SDK's buffered producer predicts.
    """
    if not partition_key:
        return 0
    h1, h2 = lookup3([ord(ch) for ch in partition_key])
    folded = (h1 ^ h2) & 0xFFFF
    if folded >= 0x8000:
        folded -= 0x10000
    return abs(folded % partition_count)
