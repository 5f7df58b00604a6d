"""What each reader read, told to a classic driver through a Spark accumulator.

A reader knows, when its sub-range is done, everything the ingestion run needs of it: how many
events, their body bytes, the first and last sequence number, the last event's offset, the
first and last enqueued time. With a ``read_stats`` id in the reader options (the id of an
accumulator the driver created, :func:`read_stats_accumulator`) each reader adds its
:data:`SubRangeStats` under its sub-range to that accumulator when it has yielded its last
batch. Spark sends a task's accumulator updates with its result, and merges a result task's
updates once per partition, before the job ends; the value is keyed by sub-range, so a task
that is re-run (or a plan read twice) replaces its entry, never adds to it.

Only a classic session has accumulators (Spark Connect has none): there the option is never
set, and ``dagster_eventhub_ingest.ops.sinks`` observes or reads back the statistics. Nothing here
is trusted alone: :func:`partition_totals` answers only when the sub-ranges tile every range
exactly, each with all its events, and ``dagster_eventhub_ingest.ops.sinks`` checks that the sink
holds as many rows as the ranges have sequence numbers.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from pyspark.accumulators import AccumulatorParam

from dagster_eventhub_ingest.resources.ranges import SeqRange

if TYPE_CHECKING:
    from pyspark import Accumulator
    from pyspark.sql import SparkSession

__all__ = [
    "PartitionTotals",
    "ReadStatsParam",
    "SubRangeKey",
    "SubRangeStats",
    "partition_totals",
    "read_stats_accumulator",
    "send_read_stats",
]

#: One sub-range's ``(events, body bytes, first sequence number, last sequence number, offset of
#: the last event, first enqueued time, last enqueued time)``; times in microseconds since the
#: epoch (UTC), None where no event had one.
SubRangeStats = tuple[int, int, int | None, int | None, str | None, int | None, int | None]
#: ``(partition id, start, end)`` of a sub-range: the accumulator's keys.
SubRangeKey = tuple[str, int, int]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class ReadStatsParam(AccumulatorParam[dict[SubRangeKey, SubRangeStats]]):
    """Sub-range -> its statistics; merging keeps the latest entry of each sub-range."""

    def zero(self, value: dict[SubRangeKey, SubRangeStats]) -> dict[SubRangeKey, SubRangeStats]:
        return {}

    def addInPlace(
        self,
        value1: dict[SubRangeKey, SubRangeStats],
        value2: dict[SubRangeKey, SubRangeStats],
    ) -> dict[SubRangeKey, SubRangeStats]:
        value1.update(value2)
        return value1


@contextmanager
def read_stats_accumulator(spark: SparkSession) -> Iterator[Accumulator[Any] | None]:
    """A fresh accumulator for one read's statistics, or None where there is none (Spark
    Connect, or a session whose SparkContext cannot be reached); dropped from this process's
    registry on exit, so a late update for it is ignored."""
    from pyspark.accumulators import _accumulatorRegistry

    from dagster_eventhub_ingest.resources.spark.kind import is_connect_session

    acc = None
    if not is_connect_session(spark):
        try:
            acc = spark.sparkContext.accumulator({}, ReadStatsParam())
        except Exception:  # a shared cluster that refuses the SparkContext: read back instead
            acc = None
    try:
        yield acc
    finally:
        if acc is not None:
            _accumulatorRegistry.pop(acc.aid, None)


def send_read_stats(aid: int, key: SubRangeKey, stats: SubRangeStats) -> None:
    """Add one sub-range's statistics to the driver's accumulator ``aid`` (on an executor,
    inside the task: Spark sends it with the task's result)."""
    from pyspark.accumulators import _deserialize_accumulator

    # The task's own copy of the accumulator (created once per task, as unpickling one would).
    _deserialize_accumulator(aid, {}, ReadStatsParam()).add({key: stats})


#: One partition's totals over its sub-ranges, as :data:`SubRangeStats` with times as UTC
#: datetimes.
PartitionTotals = tuple[
    int, int, int | None, int | None, str | None, datetime | None, datetime | None
]


def partition_totals(
    found: Mapping[SubRangeKey, SubRangeStats],
    ranges: Mapping[str, SeqRange],
    *,
    complete: bool = True,
) -> dict[str, PartitionTotals] | None:
    """Per partition of ``ranges``, the statistics of its sub-ranges together; None unless the
    sub-ranges found tile every range exactly (a reader whose update did not arrive, or one of
    another read) and, with ``complete``, each read every event of its sub-range (without it,
    a read that skipped expired events, whose plan may start after a range's start: the
    totals are of what was read)."""
    by_pid: dict[str, list[tuple[int, int, SubRangeStats]]] = {}
    for (pid, start, end), stats in found.items():
        by_pid.setdefault(pid, []).append((start, end, stats))
    if set(by_pid) != set(ranges):
        return None
    out: dict[str, PartitionTotals] = {}
    for pid, (start, end) in ranges.items():
        subs = sorted(by_pid[pid])
        # An incomplete read's plan may have cut off an expired head: its readers start later.
        expected = start if complete else max(start, subs[0][0])
        for s, e, stats in subs:
            if s != expected or (complete and stats[0] != e - s + 1):
                return None
            expected = e + 1
        if expected != end + 1:
            return None
        # Sub-ranges in order; one that read nothing (all of it skipped) has no bounds.
        read = [stats for _, _, stats in subs if stats[0]]
        firsts = [s[5] for s in read if s[5] is not None]
        lasts = [s[6] for s in read if s[6] is not None]
        out[pid] = (
            sum(s[0] for s in read),
            sum(s[1] for s in read),
            read[0][2] if read else None,
            read[-1][3] if read else None,
            read[-1][4] if read else None,
            _time(min(firsts)) if firsts else None,
            _time(max(lasts)) if lasts else None,
        )
    return out


def _time(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)
