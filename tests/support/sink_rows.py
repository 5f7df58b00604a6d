"""Rows shaped like the ``eventhubs`` source's, for the sink's tests, and the keys to compare
what a sink holds with what was written."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from dagster_eventhub_ingest.resources.eventhubs_source import eventhubs_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["T0", "events", "expected", "keys"]

T0 = datetime(2024, 5, 1, 12, tzinfo=timezone.utc)


def events(
    spark: SparkSession, ranges: dict[str, tuple[int, int]], body_size: int = 10
) -> DataFrame:
    """Events shaped like the eventhubs source: offset = 100 * seq, one second apart."""
    rows = [
        (
            bytes([seq % 256]) * body_size,
            pid,
            str(seq * 100),
            seq,
            T0 + timedelta(seconds=seq),
            None,
            f"key-{seq % 3}",
            {"n": str(seq)},
            {},
            None,
        )
        for pid, (start, end) in ranges.items()
        for seq in range(start, end + 1)
    ]
    return spark.createDataFrame(rows, eventhubs_schema()).repartition(3)


def keys(df: DataFrame) -> list[tuple[str, int]]:
    """(partition, sequence number) of every row of ``df``, sorted."""
    return sorted(
        (r.partition, r.sequenceNumber) for r in df.select("partition", "sequenceNumber").collect()
    )


def expected(ranges: dict[str, tuple[int, int]]) -> list[tuple[str, int]]:
    """(partition, sequence number) of every event of ``ranges`` (inclusive), sorted."""
    return sorted((p, s) for p, (a, b) in ranges.items() for s in range(a, b + 1))
