"""The ``parquet`` sink written from Arrow: Spark's dynamic partition overwrite, without the JVM.

:class:`ParquetBatchWriter` takes a task's Arrow record batches (the output schema: the event
columns, ``eh_source`` in a sink several sources share, ``eh_batch``) and writes the table
Spark's path (:func:`~dagster_eventhub_ingest.ops.sinks.spark_writer.write_spark`:
``partitionBy(*partition_by, "eh_batch")``, ``mode("overwrite")``,
``partitionOverwriteMode=dynamic``) writes: the same ``col=value`` directories (escaped as
Spark escapes them, null and empty as ``__HIVE_DEFAULT_PARTITION__``), the partition columns
dropped from the files, the same per-column dictionary and statistics choices and snappy.

Exactly once, as Spark's ``HadoopMapReduceCommitProtocol`` with ``dynamicPartitionOverwrite``:
each task writes its own uniquely named files into the attempt's hidden staging directory
``<path>/.ehingest-staging-<attempt>/`` and reports them; ``commit`` (on the driver) gathers
the reported files of each partition directory, deletes the final directory if present and
renames the staged one into its place, then removes the staging. Files a failed task attempt
left in the staging were never reported and are never moved. A commit without any file keeps
what an earlier attempt of the batch wrote. ``abort`` removes the staging; staging a crashed
driver left is removed by :func:`~dagster_eventhub_ingest.ops.sinks.staging.clean_batch_staging`
(its rule, :func:`~dagster_eventhub_ingest.ops.sinks.staging.remove_batch_staging`, is
applied by ``commit`` and ``abort`` for the batch's keys; a task of a failed job that was
still being stopped may write into the staging after ``abort``: the next commit of the keys
removes that).

:func:`parquet_fused_applies` says which sinks it writes; the others keep Spark's path.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceWriter,
    WriterCommitMessage,
)

from dagster_eventhub_ingest.ops.sinks.arrow_writer import ArrowBatchWriter
from dagster_eventhub_ingest.ops.sinks.batch import BATCH_COLUMN
from dagster_eventhub_ingest.ops.sinks.parquet_files import (
    PartitionedParquetFiles,
    keyed_rows,
    spark_directory_value,
    unreadable_file,
)
from dagster_eventhub_ingest.ops.sinks.staging import (
    WRITER_STAGING_PREFIX,
    clean_batch_staging,
    remove_batch_staging,
    wait_for_running_tasks,
)
from dagster_eventhub_ingest.ops.sinks.storage import delta_uri, is_local_path
from dagster_eventhub_ingest.resources.errors import SinkError, redact
from dagster_eventhub_ingest.resources.eventhubs_source.source import register_python_source
from dagster_eventhub_ingest.resources.sink import SinkSettings

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

logger = logging.getLogger(__name__)

__all__ = [
    "PARQUET_WRITER_SOURCE",
    "ParquetBatchSource",
    "ParquetBatchWriter",
    "ParquetPart",
    "ParquetTaskMessage",
    "parquet_fused_applies",
    "write_parquet_from_arrow",
]

#: Internal Python data source that writes a batch of a ``parquet`` sink with pyarrow.
PARQUET_WRITER_SOURCE = "ehingest_parquet"

#: Spark SQL types of the partition columns whose directory values this writer names as Spark
#: does (the value cast to a string; the output's partition columns are strings and
#: ``sequenceNumber``). A timestamp Spark renders in the session's time zone with its own
#: fraction rules: such sinks keep Spark's path.
_PARTITION_TYPES = ("string", "bigint")


def parquet_fused_applies(sink: SinkSettings, schema: StructType) -> bool:
    """Whether :class:`ParquetBatchWriter` writes ``sink``'s batches of ``schema`` (the output
    schema, ``eh_batch`` included) as Spark's path would; False keeps Spark's path.

    True for a ``parquet`` sink on a local path (a shared mount on a cluster) whose
    ``partition_by`` columns are strings or longs (``sequenceNumber``). False for a table (the
    catalog records partitions), an object-store URI (the ``parquet`` sink reaches it through the
    cluster's Hadoop settings, which pyarrow does not read; and pyarrow's Azure file system
    renames only on hierarchical-namespace accounts), and a ``partition_by`` column of another
    type (``enqueuedTime``: Spark renders a timestamp directory in the session's time zone).
    """
    if sink.format != "parquet" or sink.path is None or not is_local_path(sink.path):
        return False
    types = {f.name: f.dataType.simpleString() for f in schema.fields}
    if types.get(BATCH_COLUMN) != "string":
        return False
    return all(types.get(c) in _PARTITION_TYPES for c in sink.partition_by)


@dataclass(frozen=True)
class ParquetPart:
    """One file a task wrote: its partition directory (relative to the sink path), its name
    and its rows."""

    directory: str
    name: str
    rows: int


@dataclass(frozen=True)
class ParquetTaskMessage(WriterCommitMessage):
    """What a task reports to the commit: its files and rows outside the batch ranges."""

    parts: tuple[ParquetPart, ...]
    outside: int


class ParquetBatchWriter(ArrowBatchWriter):
    """Tasks write Parquet files into the attempt's staging; ``commit`` swaps in the batch's
    partition directories."""

    @classmethod
    def for_sink(
        cls, sink: SinkSettings, keys: list[str], schema: StructType
    ) -> ParquetBatchWriter:
        """The writer of one batch (``keys``) of ``sink``, whose rows have ``schema`` (the
        output schema; see :func:`parquet_fused_applies`)."""
        assert sink.path is not None
        return cls(
            sink.path,
            [*sink.partition_by, BATCH_COLUMN],
            schema.json(),
            list(keys),
            dict(sink.storage_options),
        )

    @property
    def staging(self) -> str:
        """The attempt's staging directory, relative to the sink path."""
        return f"{WRITER_STAGING_PREFIX}{self.attempt}"

    def _schema(self) -> pa.Schema:
        from pyspark.sql.types import StructType

        from dagster_eventhub_ingest.resources.eventhubs_source.schema import arrow_schema

        return arrow_schema(StructType.fromJson(json.loads(self.schema_json)))

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ParquetTaskMessage:
        """Write this task's rows into the staging, one file per partition directory."""
        schema = self._schema()
        filesystem, root = self._filesystem()
        outside = 0
        files = PartitionedParquetFiles(
            filesystem,
            f"{root}/{self.staging}",
            self.partition_cols,
            self.attempt,
            spark_directory_value,
        )
        try:
            with files:
                for batch in iterator:
                    # Rows outside the batch ranges have no key: count them, never write them.
                    table, skipped = keyed_rows(batch, schema)
                    outside += skipped
                    for _ in files.write(table):
                        pass
        except BaseException:
            for f in files.files.values():  # never reported, never moved: only litter
                try:
                    filesystem.delete_file(f.full)
                except OSError:
                    logger.debug("could not delete a failed task's file %s", f.rel)
            raise
        parts = tuple(
            ParquetPart(files.directory_of(values), f.rel.rsplit("/", 1)[1], f.rows)
            for values, f in files.files.items()
        )
        return ParquetTaskMessage(parts=parts, outside=outside)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Replace each partition directory the tasks wrote by the staged one, as Spark's
        dynamic partition overwrite does; remove the staging."""
        msgs = [m for m in messages if isinstance(m, ParquetTaskMessage)]
        if sum(m.outside for m in msgs):
            # Never commit a wrong DataFrame; the caller reports it from its own count (an
            # exception raised here would reach Spark's caller as a Python worker traceback).
            self.abort(list(messages))
            return
        parts = [p for m in msgs for p in m.parts]
        filesystem, root = self._filesystem()
        staging = f"{root}/{self.staging}"
        try:
            # No file (every event skipped): keep what an earlier attempt of the batch wrote,
            # as Spark does (it replaces only the directories its tasks wrote).
            if parts:
                self._swap_in(filesystem, root, staging, parts)
        finally:
            self._remove_staging(filesystem, staging)

    def _swap_in(self, filesystem: Any, root: str, staging: str, parts: list[ParquetPart]) -> None:
        for p in parts:
            problem = unreadable_file(
                filesystem, f"{staging}/{p.directory}/{p.name}", f"{p.directory}/{p.name}", p.rows
            )
            if problem is not None:
                raise SinkError(
                    f"sink parquet path {self.location!r}: not committing batch {self.keys}: "
                    f"{problem}. The executors wrote where this driver cannot read (a local "
                    "path on a cluster?): use a location every node shares (a mounted volume)"
                )
        # The reported files only (a failed attempt's stay behind), one directory each.
        ready = f"{staging}/_commit"
        for p in parts:
            filesystem.create_dir(f"{ready}/{p.directory}", recursive=True)
            filesystem.move(f"{staging}/{p.directory}/{p.name}", f"{ready}/{p.directory}/{p.name}")
        from pyarrow import fs as pafs

        for directory in sorted({p.directory for p in parts}):
            final = f"{root}/{directory}"
            if filesystem.get_file_info(final).type != pafs.FileType.NotFound:
                filesystem.delete_dir(final)
            filesystem.create_dir(final.rsplit("/", 1)[0], recursive=True)
            filesystem.move(f"{ready}/{directory}", final)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Remove the attempt's staging (best effort: nobody reads it)."""
        filesystem, root = self._filesystem()
        self._remove_staging(filesystem, f"{root}/{self.staging}")

    def _remove_staging(self, filesystem: Any, staging: str) -> None:
        from pyarrow import fs as pafs

        try:
            if filesystem.get_file_info(staging).type != pafs.FileType.NotFound:
                filesystem.delete_dir(staging)
        except OSError as exc:
            logger.warning(
                "could not remove the staging %s of batch %s: %s",
                staging,
                self.keys,
                redact(str(exc))[:200],
            )
        # What a crashed earlier attempt of these keys left.
        remove_batch_staging(self.location, self.storage_options, self.keys)


class ParquetBatchSource(DataSource):
    """``df.write.format("ehingest_parquet")``: :class:`ParquetBatchWriter` behind Spark's own
    Python data source write (the JVM hands the tasks Arrow batches of its rows)."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return PARQUET_WRITER_SOURCE

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """A writer for one batch; the sink path and batch keys come in the options."""
        return ParquetBatchWriter(
            location=self.options["path"],
            partition_cols=json.loads(self.options["partition_by"]),
            schema_json=schema.json(),
            keys=json.loads(self.options["keys"]),
            storage_options=json.loads(self.options.get("storage_secret_options", "{}")),
        )


def write_parquet_from_arrow(keyed: DataFrame, sink: SinkSettings, keys: list[str]) -> None:
    """Write ``keyed`` (the output schema; ``eh_batch`` null outside the batch ranges) to the
    ``parquet`` sink through :class:`ParquetBatchWriter` in Spark's tasks."""
    assert sink.path is not None
    register_python_source(keyed.sparkSession, ParquetBatchSource)
    try:
        (
            keyed.write.format(PARQUET_WRITER_SOURCE)
            .mode("append")
            .option("path", delta_uri(sink.path))
            .option("partition_by", json.dumps([*sink.partition_by, BATCH_COLUMN]))
            .option("keys", json.dumps(keys))
            # The key holds "secret" so Spark redacts the value in plans and logs.
            .option("storage_secret_options", json.dumps(dict(sink.storage_options)))
            .save()
        )
    except BaseException:
        # A task of the failed job that Spark was still stopping may write into the staging
        # after the abort removed it (the next commit of these keys would remove it too).
        wait_for_running_tasks(keyed.sparkSession, timeout=10.0)
        clean_batch_staging(sink, keys, settle_seconds=3.0)
        raise
