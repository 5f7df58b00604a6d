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
from typing import Any

EventKey = tuple[str, int, str]

__all__ = [
    "assert_exactly_once",
    "landed_by_source",
    "landed_events",
    "landed_in_sink",
    "send_tagged",
    "sent_events",
]


def send_tagged(
    hub: Any, sent: dict[str, list[bytes]], n: int, tag: str, *, repeat: int = 4
) -> None:
    """Send ``n`` distinct bodies (``<tag>-p<partition>-e<i>-``, ``repeat`` times over) to every
    partition of the emulator ``hub``, 500 to a call, and record them in ``sent`` for
    :func:`sent_events`."""
    for pid in hub.partition_ids:
        bodies = [f"{tag}-p{pid}-e{i}-".encode() * repeat for i in range(n)]
        for i in range(0, n, 500):
            hub.send(pid, bodies[i : i + 500])
        sent.setdefault(pid, []).extend(bodies)


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


def landed_by_source(spark: Any, sink: Any) -> dict[str, collections.Counter]:
    """What ``sink`` (a ``SinkSettings``: any format, a catalog table too) holds as Spark reads
    it, per ``eh_source``, in the form of :func:`sent_events`."""
    found: dict[str, collections.Counter] = {}
    for source, *event in _sink_rows(spark, sink, "eh_source"):
        found.setdefault(source, collections.Counter())[tuple(event)] += 1
    return found


def landed_in_sink(spark: Any, sink: Any) -> collections.Counter:
    """What ``sink`` holds as Spark reads it, as :func:`sent_events`."""
    return collections.Counter(tuple(row) for row in _sink_rows(spark, sink))


def _sink_rows(spark: Any, sink: Any, *first: str) -> list[list[Any]]:
    """``first`` columns, then (partition, sequence number, sha256(body)), per row of ``sink``."""
    from dagster_eventhub_ingest.ops.sinks.read import read_sink

    df = read_sink(spark, sink).select(*first, "partition", "sequenceNumber", "body")
    return [
        [*row[: len(first)], str(pid), int(seq), hashlib.sha256(bytes(body)).hexdigest()]
        for row in df.collect()
        for pid, seq, body in [row[len(first) :]]
    ]
