"""The batch read back before any checkpoint moves: its row count, and its statistics.

Output that executors wrote where the driver (or the next reader) cannot see it is an error,
never a silent loss: :func:`verify_written` compares the rows the sink holds for the batch's keys
with the rows the write consumed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dagster_eventhub_ingest.ops.sinks.batch import BATCH_COLUMN
from dagster_eventhub_ingest.ops.sinks.checks import driver_sees_path
from dagster_eventhub_ingest.ops.sinks.failures import failure_cause, sink_error
from dagster_eventhub_ingest.ops.sinks.read import nothing_there, read_batches
from dagster_eventhub_ingest.ops.sinks.storage import delta_uri, hidden_name
from dagster_eventhub_ingest.resources.errors import ConfigurationError, SinkError
from dagster_eventhub_ingest.resources.sink import DELTALAKE_FORMAT, SinkSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

__all__ = ["delta_batch_rows", "parquet_batch_rows", "read_back_stats", "verify_written"]


def verify_written(
    spark: SparkSession,
    sink: SinkSettings,
    keys: list[str],
    written: int,
    location: str,
    *,
    with_stats: bool = False,
    schema: StructType | None = None,
) -> dict[str, dict[str, Any]]:
    """Read back the batch's row count; raise unless it equals the rows the write consumed.

    This runs before the caller moves any checkpoint: output that executors wrote where the
    driver (or the next reader) cannot see it is an error, never a silent loss. With
    ``with_stats`` (Spark formats) the same pass returns, per batch key found, the statistics
    :func:`read_back_stats` reads; otherwise an empty dict. ``schema``: what was written (see
    :func:`read_batches`). A ``parquet`` sink on a local path (a mount the executors share) is
    counted from its files' footers here, where this process is Spark's driver
    (:func:`parquet_batch_rows`, no Spark job); the others by a Spark read.
    """
    stats: dict[str, dict[str, Any]] = {}
    try:
        if sink.format == DELTALAKE_FORMAT:
            found = delta_batch_rows(sink, keys)
        elif not with_stats and sink.format == "parquet" and driver_sees_path(sink, spark):
            found = parquet_batch_rows(sink, keys)
        elif with_stats:
            stats = read_back_stats(spark, sink, keys, schema)
            found = sum(int(s["n"]) for s in stats.values())
        else:
            found = read_batches(spark, sink, keys, schema=schema).count()
    except (SinkError, ConfigurationError):
        raise
    except Exception as exc:
        if written == 0 and nothing_there(exc):
            return stats  # nothing written, nothing there
        raise sink_error(
            f"sink {sink.format} {location!r}: the batch {sorted(keys)} was written but cannot "
            f"be read back to verify it: {failure_cause(exc)}; no checkpoint moved. Check that the "
            "driver and every executor see the same location",
            exc,
        ) from exc
    if found != written:
        raise SinkError(
            f"sink {sink.format} {location!r}: verification failed for batch {sorted(keys)}: "
            f"{written} event(s) were written but {found} are readable there; no checkpoint "
            "moved. The executors probably wrote to storage the driver does not share (a local "
            "path on a cluster): use a shared location (abfss://..., a table)"
        )
    return stats


def read_back_stats(
    spark: SparkSession, sink: SinkSettings, keys: list[str], schema: StructType | None = None
) -> dict[str, dict[str, Any]]:
    """Per batch key: rows, sequence bounds, last offset, first/last enqueued time in the sink.

    One grouped aggregation over the batch's rows (partition pruning on ``eh_batch``) that
    reads only the sequence number, offset and enqueued time columns, never the bodies: in a
    columnar format a small fraction of the batch's bytes, and a few aggregates per row once,
    where observing them during the write updates 7 per partition for every row.
    """
    from pyspark.sql import functions as F

    # The source's types, whatever the format's reader inferred (a no-op for Parquet and ORC).
    # No F.lit: pyspark's lit imports pandas (0.3-0.4 s of the driver's CPU on a cold run).
    seq = F.col("sequenceNumber").cast("long")
    when = F.col("enqueuedTime").cast("timestamp")
    offset = F.col("offset").cast("string")
    # The last offset as a number where it is one (Event Hubs' offsets are decimal positions):
    # an aggregation whose buffers are all fixed-width is hashed, where one string among them
    # makes Spark sort every row read back, twice (partial and final). An offset that does not
    # come back from a long unchanged (not decimal, a leading zero, too large) is null here and
    # read again as the string it is.
    as_long = offset.try_cast("long")
    batches = read_batches(spark, sink, keys, schema=schema)
    rows = (
        batches.groupBy(BATCH_COLUMN)
        .agg(
            F.count("*").alias("n"),
            F.min(seq).alias("fs"),
            F.max(seq).alias("ls"),
            F.max_by(F.when(as_long.cast("string") == offset, as_long), seq).alias("lo"),
            F.min(when).alias("ft"),
            F.max(when).alias("lt"),
        )
        .collect()
    )
    stats = {row[BATCH_COLUMN]: row.asDict() for row in rows}
    textual = []  # every key here has rows: a null is an offset that is not a plain number
    for key, found in stats.items():
        if found["lo"] is None:
            textual.append(key)
        else:
            found["lo"] = str(found["lo"])
    if textual:
        for row in (
            batches.where(F.col(BATCH_COLUMN).isin(textual))
            .groupBy(BATCH_COLUMN)
            .agg(F.max_by(offset, seq).alias("lo"))
            .collect()
        ):
            stats[row[BATCH_COLUMN]]["lo"] = row["lo"]
    return stats


def delta_batch_rows(sink: SinkSettings, keys: list[str]) -> int:
    """Rows the Delta log holds for ``keys`` (from its add actions, nothing read)."""
    import pyarrow as pa
    from deltalake import DeltaTable

    assert sink.path is not None
    delta = DeltaTable(delta_uri(sink.path), storage_options=dict(sink.storage_options) or None)
    table = pa.table(delta.get_add_actions(flatten=True))
    column = f"partition.{BATCH_COLUMN}"
    if table.num_rows == 0:
        return 0
    total = 0
    for key, rows in zip(
        table.column(column).to_pylist(), table.column("num_records").to_pylist(), strict=True
    ):
        if key in keys:
            total += int(rows or 0)
    return total


def parquet_batch_rows(sink: SinkSettings, keys: list[str]) -> int:
    """Rows a ``parquet`` sink on a local path holds for ``keys``, from the footers of the files
    a reader of the sink sees in their ``eh_batch`` directories (under the ``partition_by``
    ones; :meth:`~dagster_eventhub_ingest.ops.sinks.place.LocalPlace.batch_directories`);
    nothing else is read. What Spark's count of the same batches reads, without a job."""
    import os

    import pyarrow.parquet as pq

    from dagster_eventhub_ingest.ops.sinks.place import LocalPlace

    wanted = set(keys)
    try:
        directories = LocalPlace(sink).batch_directories()
    except FileNotFoundError:
        return 0  # no folder yet: nothing there
    total = 0
    for key, directory in directories:
        if key in wanted:
            for entry in os.scandir(directory):
                if entry.is_file() and not hidden_name(entry.name):
                    total += pq.ParquetFile(entry.path).metadata.num_rows
    return total
