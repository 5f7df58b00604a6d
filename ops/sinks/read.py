"""A sink's columns, and reading what it holds back: the verification, checks and tests.

:func:`output_columns` are what every batch is written with (one declaration: the ``deltalake``
table and a catalog table a run creates before its first claim take it from here, as
:func:`output_schema`).
:func:`read_sink` returns the sink's content, :func:`read_batches` only some batches' rows,
through their own directories where it can.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from dagster_eventhub_ingest.ops.sinks.batch import BATCH_COLUMN, SOURCE_COLUMN
from dagster_eventhub_ingest.ops.sinks.failures import failure_cause, sink_error
from dagster_eventhub_ingest.ops.sinks.storage import delta_uri
from dagster_eventhub_ingest.resources.failures import error_condition
from dagster_eventhub_ingest.resources.settings import EVENT_FIELDS
from dagster_eventhub_ingest.resources.sink import (
    BUILTIN_FORMATS,
    DELTALAKE_FORMAT,
    SinkSettings,
    SinkSources,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = ["delta_output_schema", "output_columns", "output_schema", "read_batches", "read_sink"]

logger = logging.getLogger(__name__)


def output_columns(sources: SinkSources = "one") -> tuple[tuple[str, str], ...]:
    """The columns a sink of ``sources`` (``SinkSettings.sources``) gets, as ``(name, Spark SQL
    type)``: the ``eventhubs`` source's, ``eh_source`` in a sink several sources share, and the
    batch key (what ``write_batch`` writes, in its order; the Dagster asset's column schema,
    described without pyspark)."""
    extra = ((SOURCE_COLUMN, "string"),) if sources == "many" else ()
    return (*EVENT_FIELDS, *extra, (BATCH_COLUMN, "string"))


def output_schema(sources: SinkSources = "one") -> StructType:
    """:func:`output_columns` as a Spark schema (every column nullable)."""
    from dagster_eventhub_ingest.resources.eventhubs_source.schema import spark_schema

    return spark_schema(output_columns(sources))


def delta_output_schema(sources: SinkSources = "one") -> pa.Schema:
    """:func:`output_schema` as the ``deltalake`` sink's Arrow schema."""
    return delta_arrow_schema(output_schema(sources))


def delta_arrow_schema(schema: StructType) -> pa.Schema:
    import pyarrow as pa

    from dagster_eventhub_ingest.resources.eventhubs_source.schema import arrow_schema

    arrow = arrow_schema(schema)
    # delta-rs stores timestamps as UTC microseconds; Spark labels them with the session zone.
    return pa.schema(
        [
            pa.field(f.name, pa.timestamp("us", tz="UTC"), f.nullable)
            if pa.types.is_timestamp(f.type)
            else f
            for f in arrow
        ]
    )


def _batch_filter(keys: list[str]) -> Column:
    from pyspark.sql import functions as F

    return F.col(BATCH_COLUMN).isin(keys)


def read_sink(spark: SparkSession, sink: SinkSettings) -> DataFrame:
    """The sink's current content as a DataFrame (tests, demos, verification).

    ``deltalake`` tables are read through delta-rs into Arrow on the driver: meant for checks,
    not for large tables (on a cluster with Delta use ``spark.read.format("delta")``).
    """
    if sink.format == DELTALAKE_FORMAT:
        from deltalake import DeltaTable

        assert sink.path is not None
        uri = delta_uri(sink.path)
        try:
            table = DeltaTable(
                uri, storage_options=dict(sink.storage_options) or None
            ).to_pyarrow_table()
        except Exception as exc:
            raise sink_error(
                f"sink deltalake path {uri!r}: cannot read: {failure_cause(exc)}", exc
            ) from exc
        if table.num_rows == 0:
            import pyarrow as pa

            # Spark cannot build a DataFrame from columns without chunks: one empty chunk each.
            table = pa.Table.from_arrays(
                [pa.array([], type=f.type) for f in table.schema], schema=table.schema
            )
        return spark.createDataFrame(table)
    if sink.path is not None:
        with _partition_values_as_written(spark):
            reader = spark.read.format(sink.format)
            if sink.format in ("parquet", "orc"):
                # Batches written before a column existed (amqpBody, eh_source) lack it.
                reader = reader.option("mergeSchema", "true")
            return reader.load(sink.path)
    assert sink.table is not None
    return spark.table(sink.table)


@contextlib.contextmanager
def _partition_values_as_written(spark: SparkSession) -> Iterator[None]:
    """Hive-style directories would turn partition "0" into an int: keep the written types
    (partition discovery runs inside load(), so the setting only needs to span it).

    Not on Spark Connect: there load() only describes the read, which the server resolves when
    the read runs, after this; and the session may be shared by concurrent runs
    (:mod:`dagster_eventhub_ingest.resources.spark.connect_session`), whose sets and restores
    would interleave.
    """
    from dagster_eventhub_ingest.resources.spark.kind import is_connect_session

    if is_connect_session(spark):
        yield
        return
    key = "spark.sql.sources.partitionColumnTypeInference.enabled"
    previous = spark.conf.get(key, None)
    spark.conf.set(key, "false")
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, previous)


#: Batch keys written into a glob as they are: what Spark's partition directory names keep
#: unescaped and Hadoop's glob syntax does not interpret.
_GLOB_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.-]+")


def read_batches(
    spark: SparkSession, sink: SinkSettings, keys: list[str], *, schema: StructType | None = None
) -> DataFrame:
    """The rows of the batches ``keys`` in the sink.

    A path of Spark's own file formats (parquet, orc, json) is read through the batches' own
    directories (one glob,
    ``<path>/<a level per partition_by column>/eh_batch={k1,k2}``, the path as base for
    partition discovery): reading the whole sink lists every batch directory it ever got and
    reads their footers, which grows with every run (2,000 batch directories: 5.7-6.8 s a
    verification, 8,000: 24-25 s; the batch's own: 0.15 s). A glob that matches nothing is
    Spark's PATH_NOT_FOUND. Keys with other characters, tables, and the table formats (delta,
    iceberg, hudi, ``deltalake``: what their log says is in the table, not every file under the
    path) read the sink with a filter on the key.

    ``schema``: the columns the batches were written with (the verification passes the
    DataFrame it wrote), so the format's reader takes them as given: Parquet and ORC skip the
    job that reads a footer for the schema (one Spark job fewer per cycle), JSON the full pass
    over the batch that infers one. Without it, the files' schema is inferred.
    """
    if (
        sink.path is None
        or sink.format not in BUILTIN_FORMATS
        or not keys
        or not all(_GLOB_PLAIN_KEY.fullmatch(k) for k in keys)
    ):
        return read_sink(spark, sink).where(_batch_filter(keys))
    root = sink.path.rstrip("/")
    levels = "[^._]*/" * len(sink.partition_by)  # not Spark's _temporary or .spark-staging-*
    batches = keys[0] if len(keys) == 1 else "{" + ",".join(keys) + "}"
    pattern = f"{root}/{levels}{BATCH_COLUMN}={batches}"
    reader = spark.read.format(sink.format).option("basePath", root)
    if schema is not None:
        reader = reader.schema(schema)
    with _partition_values_as_written(spark):
        df = reader.load(_glob_directories(spark, pattern) or pattern)
    return df.where(_batch_filter(keys))


#: What makes Spark take a path for a glob (``SparkHadoopUtil.isGlobPath``).
_GLOB_CHARACTERS = frozenset("{}[]*?\\")


def _glob_directories(spark: SparkSession, pattern: str) -> list[str] | None:
    """The directories ``pattern`` matches, globbed by the driver's Hadoop file system, or None
    to pass Spark the pattern itself (Spark Connect, which has no JVM here; nothing matched, so
    Spark raises its PATH_NOT_FOUND; a failure; a match Spark would glob again).

    Spark looks for a streaming sink's ``_spark_metadata`` under a lone load path without
    globbing it, so a multi-key pattern made every verification log a WARN with a ~90-line
    ``FileNotFoundException`` stack trace (``FileStreamSink: Assume no metadata directory``):
    on the CLI's stderr and in a cluster's driver log, on every run. The directories
    themselves are paths that exist. Hadoop expands the braces into one lookup per key, as
    Spark's own glob would.
    """
    from dagster_eventhub_ingest.resources.spark.kind import is_connect_session

    if is_connect_session(spark):
        return None
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        path = jvm.org.apache.hadoop.fs.Path(pattern)
        fs = path.getFileSystem(spark._jsparkSession.sessionState().newHadoopConf())
        found = fs.globStatus(path) or []
        directories = sorted(str(s.getPath().toString()) for s in found if s.isDirectory())
    except Exception:
        logger.debug("globbing %s on the driver failed; Spark globs it", pattern, exc_info=True)
        return None
    if any(_GLOB_CHARACTERS.intersection(d) for d in directories):
        return None  # a partition value with a glob character: only the pattern reads it
    return directories or None


def nothing_there(exc: BaseException) -> bool:
    """Whether ``exc`` is Spark's answer to a path or glob that matches nothing."""
    return error_condition(exc) == "PATH_NOT_FOUND"
