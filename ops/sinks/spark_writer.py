"""Spark formats: a batch written by dynamic partition overwrite on its batch key.

Tasks write into a hidden staging directory; the job commit swaps in the batch's partition
directories, so rewriting the same intent replaces them. A table is written with
``insertInto(overwrite=True)`` under the same overwrite mode.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from dagster_eventhub_ingest.ops.sinks.batch import BATCH_COLUMN
from dagster_eventhub_ingest.ops.sinks.parquet_columns import NO_STATISTICS_COLUMNS, PLAIN_COLUMNS
from dagster_eventhub_ingest.resources.errors import SinkError, redact
from dagster_eventhub_ingest.resources.failures import already_exists
from dagster_eventhub_ingest.resources.sink import SinkSettings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

logger = logging.getLogger(__name__)

__all__ = ["format_options", "write_spark"]


def format_options(sink: SinkSettings) -> dict[str, str]:
    """Write options of the sink's format (parquet-mr reads per-column ones as ``key#column``;
    the columns: :mod:`dagster_eventhub_ingest.ops.sinks.parquet_columns`)."""
    if sink.format != "parquet":
        return {}
    return {
        **{f"parquet.enable.dictionary#{column}": "false" for column in PLAIN_COLUMNS},
        **{
            f"parquet.column.statistics.enabled#{column}": "false"
            for column in NO_STATISTICS_COLUMNS
        },
    }


def write_spark(out: DataFrame, sink: SinkSettings) -> None:
    partition_cols = [*sink.partition_by, BATCH_COLUMN]
    if sink.path is not None:
        (
            out.write.format(sink.format)
            .mode("overwrite")
            .option("partitionOverwriteMode", "dynamic")
            .options(**format_options(sink))
            .partitionBy(*partition_cols)
            .save(sink.path)
        )
    else:
        assert sink.table is not None
        _write_table(out, sink.table, sink.format, partition_cols)


def _write_table(df: DataFrame, table: str, fmt: str, partition_cols: list[str]) -> None:
    from pyspark.errors import AnalysisException

    spark = df.sparkSession
    if not spark.catalog.tableExists(table):
        try:
            df.write.format(fmt).partitionBy(*partition_cols).saveAsTable(table)
            return
        except AnalysisException as exc:
            # A peer run created it between the check and the write: insert like any later run.
            if not already_exists(exc):
                raise
    existing = [c.name for c in spark.catalog.listColumns(table)]
    if BATCH_COLUMN not in existing:
        raise SinkError(
            f"sink table {table!r} exists without the {BATCH_COLUMN!r} partition column; "
            "it was not created by this writer, so a batch cannot be replaced idempotently. "
            "Write to a new table"
        )
    added = _add_missing_columns(df, table, existing)
    if added:
        existing = [c.name for c in spark.catalog.listColumns(table)]
    # insertInto is positional: align with the table's column order.
    conf_key = "spark.sql.sources.partitionOverwriteMode"
    previous = spark.conf.get(conf_key, None)
    spark.conf.set(conf_key, "dynamic")
    try:
        df.select(*existing).write.insertInto(table, overwrite=True)
    finally:
        if previous is None:
            spark.conf.unset(conf_key)
        else:
            spark.conf.set(conf_key, previous)


def _add_missing_columns(df: DataFrame, table: str, existing: list[str]) -> list[str]:
    """Add the columns a table created by an earlier version lacks (``amqpBody``, ``eh_source``),
    so that aligning the batch with the table's columns drops none of them. Rows written before
    read them as null. Returns the names added."""
    missing = [f for f in df.schema.fields if f.name not in existing]
    if not missing:
        return []
    columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in missing)
    try:
        df.sparkSession.sql(f"ALTER TABLE {table} ADD COLUMNS ({columns})")
    except Exception as exc:
        raise SinkError(
            f"sink table {table!r} lacks the column(s) {[f.name for f in missing]} this version "
            f"writes, and adding them failed: {redact(str(exc))[:300]}. Add them yourself "
            f"(ALTER TABLE {table} ADD COLUMNS ({columns})) or write to a new table"
        ) from exc
    logger.info("sink table %r: added the column(s) %s", table, [f.name for f in missing])
    return [f.name for f in missing]
