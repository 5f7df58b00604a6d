"""The exactly-once claim as one comparison: what landed in the sink equals what was sent.

Every event is compared by ``(partition, sequence number, sha256(body))``: a duplicate, a
missing event or an unexpected one (e.g. read from the wrong place) each fail with examples.
Used by the crash test (``tests/integration/test_exactly_once.py``) and the edge-state scenarios.
"""

from __future__ import annotations

import collections
import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path

EventKey = tuple[str, int, str]

__all__ = ["assert_exactly_once", "landed_events", "sent_events"]


def sent_events(
    sent: Mapping[str, Iterable[bytes]], first_sequence: int = 0
) -> collections.Counter:
    """Events sent per partition, numbered from ``first_sequence`` in order of sending."""
    return collections.Counter(
        (pid, seq, hashlib.sha256(body).hexdigest())
        for pid, bodies in sent.items()
        for seq, body in enumerate(bodies, start=first_sequence)
    )


def landed_events(path: str | Path) -> collections.Counter:
    """Every row of a Parquet sink directory (any partitioning), read with pyarrow."""
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=["partition", "sequenceNumber", "body"])
    return collections.Counter(
        (str(p), int(s), hashlib.sha256(b).hexdigest())
        for p, s, b in zip(
            table.column("partition").to_pylist(),
            table.column("sequenceNumber").to_pylist(),
            table.column("body").to_pylist(),
            strict=True,
        )
    )


def assert_exactly_once(got: collections.Counter, expected: collections.Counter) -> None:
    """Fail naming duplicated, missing and unexpected events (a few examples of each)."""
    duplicates = {k: n for k, n in got.items() if n > 1}
    missing = expected - got
    extra = got - expected
    assert not duplicates, f"{len(duplicates)} duplicated, e.g. {list(duplicates)[:3]}"
    assert not missing, f"{len(missing)} missing, e.g. {sorted(missing)[:3]}"
    assert not extra, f"{len(extra)} unexpected, e.g. {sorted(extra)[:3]}"
