"""What a written batch amounts to per partition, and where those statistics come from.

:func:`write_batch <dagster_eventhub_ingest.ops.sinks.write.write_batch>` counts events, body
bytes, sequence and enqueued-time bounds and the last offset of each partition of a batch, by
one of four methods (:data:`StatsMethod`, docs/sinks.md has the measurements): observed while
the write consumes the DataFrame, read back from the sink (all, or all but the body bytes), or
told by the readers themselves.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal

from dagster_eventhub_ingest.ops.sinks.batch import PartitionWriteStats
from dagster_eventhub_ingest.ops.sinks.sql import in_range_sql, in_ranges_sql
from dagster_eventhub_ingest.resources.errors import ConfigurationError, SinkError
from dagster_eventhub_ingest.resources.eventhubs_source.stats import SubRangeKey, SubRangeStats
from dagster_eventhub_ingest.resources.ranges import SeqRange
from dagster_eventhub_ingest.resources.sink import DELTALAKE_FORMAT, SinkSettings

if TYPE_CHECKING:
    from pyspark.sql import Column

logger = logging.getLogger(__name__)

__all__ = [
    "STAT_SQL",
    "StatsMethod",
    "as_utc",
    "choose_stats_method",
    "observed_columns",
    "row_from_readers",
    "row_from_split",
    "stat_columns",
    "stats_from_row",
]


StatsMethod = Literal["split", "observe", "readback", "reader"]


#: Formats read back column by column: their verification pass can return the statistics too,
#: reading only the small columns (see :func:`write_batch`, ``stats_method="split"``).
_COLUMNAR_FORMATS = frozenset({"parquet", "orc", "delta", "iceberg", "hudi"})


#: From this many partitions in a batch ``split`` costs less than ``observe``. A warm JVM spends
#: the same per event at 4 (9.7 vs 10.3 us) and half at 32 (41.5 vs 19.7 us)
#: (bench/write_partitions.py); a JVM that has not run the write yet (a scheduled run's) pays
#: ``observe``'s 2 + 7 x P aggregates again in analysis, code generation and compilation: at 4
#: partitions, 100k events in-process with the JVM up, 5.71 -> 5.27 s (median of 5 alternated
#: pairs, CPU 9.0 -> 8.1 s), warm and at 1M the same within noise; at 2 partitions ``split``
#: loses (3.72 -> 3.95 s). docs/sinks.md.
_SPLIT_FROM_PARTITIONS = 4


#: The columns ``split`` reads back (with the batch key).
_READ_BACK_COLUMNS = ("sequenceNumber", "offset", "enqueuedTime")


def choose_stats_method(
    sink: SinkSettings,
    partitions: int,
    requested: StatsMethod | None = None,
    *,
    by_readers: bool = False,
) -> StatsMethod:
    """The method :func:`write_batch` uses for a batch of ``partitions`` partitions.

    ``requested``, or by default ``reader`` when the readers tell what they read
    (``by_readers``), else ``split`` for a batch of many partitions where the read-back can
    skip the bodies. ``reader`` needs the readers' statistics. ``split`` becomes ``observe``
    where its read-back cannot serve: ``deltalake`` (its verification reads the Delta log, not
    the rows) and an output partitioned by a read-back column (partition directories come
    back as strings).
    """
    if requested == "reader" and not by_readers:
        raise ConfigurationError("write_batch: stats_method='reader' needs read_stats")
    method = requested or (
        "reader"
        if by_readers
        else "split"
        if sink.format in _COLUMNAR_FORMATS and partitions >= _SPLIT_FROM_PARTITIONS
        else "observe"
    )
    if method == "split" and (
        sink.format == DELTALAKE_FORMAT or set(sink.partition_by) & set(_READ_BACK_COLUMNS)
    ):
        return "observe"
    return method


def row_from_readers(
    found: Mapping[SubRangeKey, SubRangeStats],
    ranges: Mapping[str, SeqRange],
    *,
    complete: bool = True,
) -> dict[str, Any] | None:
    """The row :func:`stats_from_row` reads, from what the readers said they read; None (the
    statistics are then read back) unless their sub-ranges tile ``ranges`` exactly, each with
    every event of it (``complete``; without it, whatever the readers read of it)."""
    from dagster_eventhub_ingest.resources.eventhubs_source.stats import partition_totals

    totals = partition_totals(found, ranges, complete=complete)
    if totals is None:
        logger.warning(
            "the readers' statistics do not cover the batch %s (%d sub-range(s) reported): "
            "reading them back from the sink",
            dict(ranges),
            len(found),
        )
        return None
    row: dict[str, Any] = {}
    for i, pid in enumerate(ranges):
        for name, value in zip(STAT_SQL, totals[pid], strict=True):
            row[f"{name}{i}"] = value
    return row


def row_from_split(
    observed: Mapping[str, Any],
    read_back: Mapping[str, Mapping[str, Any]],
    ranges: Mapping[str, SeqRange],
    keys: Mapping[str, str],
    location: str,
) -> dict[str, Any]:
    """The row :func:`stats_from_row` reads, from observed bytes and read-back statistics.

    Rows of a batch key outside that key's range were not put there by this write (a
    hand-edited or foreign directory): an error, before any checkpoint moves.
    """
    row: dict[str, Any] = {}
    for i, (pid, (start, end)) in enumerate(ranges.items()):
        found = read_back.get(keys[pid], {})
        first, last = found.get("fs"), found.get("ls")
        if (first is not None and first < start) or (last is not None and last > end):
            raise SinkError(
                f"sink {location!r}: batch {keys[pid]} holds sequence numbers [{first}, "
                f"{last}] outside its range [{start}, {end}]; no checkpoint moved. Something "
                "other than this pipeline wrote into the batch's directory: remove it and run "
                "again (the batch is rewritten)"
            )
        row[f"n{i}"] = found.get("n")
        row[f"b{i}"] = observed.get(f"b{i}")
        for name in ("fs", "ls", "lo", "ft", "lt"):
            row[f"{name}{i}"] = found.get(name)
    return row


#: The statistics of one partition, by name prefix (``n0``, ``b0``, ...): SQL aggregates of
#: the rows where ``{p}`` (the row is in the partition's range) holds.
STAT_SQL = {
    "n": "sum(CASE WHEN {p} THEN 1 ELSE 0 END)",
    "b": "sum(CASE WHEN {p} THEN length(`body`) END)",
    "fs": "min(CASE WHEN {p} THEN `sequenceNumber` END)",
    "ls": "max(CASE WHEN {p} THEN `sequenceNumber` END)",
    "lo": "max_by(CASE WHEN {p} THEN `offset` END, CASE WHEN {p} THEN `sequenceNumber` END)",
    "ft": "min(CASE WHEN {p} THEN `enqueuedTime` END)",
    "lt": "max(CASE WHEN {p} THEN `enqueuedTime` END)",
}


def stat_columns(
    ranges: Mapping[str, SeqRange], names: tuple[str, ...] = tuple(STAT_SQL)
) -> list[Column]:
    """The statistics ``names`` of every partition, ``<name><i>`` for the i-th range."""
    from pyspark.sql import functions as F

    cols: list[Column] = []
    for i, (pid, (start, end)) in enumerate(ranges.items()):
        in_range = in_range_sql(pid, start, end)
        cols += [F.expr(f"{STAT_SQL[n].format(p=in_range)} AS `{n}{i}`") for n in names]
    return cols


def observed_columns(ranges: Mapping[str, SeqRange], method: StatsMethod) -> list[Column]:
    """What :func:`write_batch` observes while it writes: the rows outside and inside the
    ranges, and the statistics ``method`` does not read back (all, body bytes, or none)."""
    from pyspark.sql import functions as F

    in_ranges = in_ranges_sql(ranges)
    cols = [
        F.expr(f"sum(CASE WHEN {in_ranges} THEN 0 ELSE 1 END) AS `outside`"),
        F.expr(f"sum(CASE WHEN {in_ranges} THEN 1 ELSE 0 END) AS `inside`"),
    ]
    if method == "observe":
        cols += stat_columns(ranges)
    elif method == "split":
        # Body bytes, the one statistic split observes (the rest is read back).
        cols += stat_columns(ranges, ("b",))
    return cols


def stats_from_row(
    row: Mapping[str, Any], ranges: Mapping[str, SeqRange], keys: Mapping[str, str]
) -> dict[str, PartitionWriteStats]:
    out: dict[str, PartitionWriteStats] = {}
    for i, (pid, (start, end)) in enumerate(ranges.items()):
        out[pid] = PartitionWriteStats(
            partition_id=pid,
            start=start,
            end=end,
            batch_key=keys[pid],
            events=int(row.get(f"n{i}") or 0),
            bytes=int(row.get(f"b{i}") or 0),
            first_sequence_number=_opt_int(row.get(f"fs{i}")),
            last_sequence_number=_opt_int(row.get(f"ls{i}")),
            last_offset=row.get(f"lo{i}"),
            first_enqueued_time=as_utc(row.get(f"ft{i}")),
            last_enqueued_time=as_utc(row.get(f"lt{i}")),
        )
    return out


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def as_utc(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime) and value.tzinfo is None:
        # Spark hands back naive local times; the local sessions run in UTC (see spark_session).
        return value.astimezone(timezone.utc)
    return value
