"""The ``deltalake`` sink: Parquet parts written by Spark's tasks, one Delta transaction on the
driver (delta-rs, no Spark jars).

Each task writes its own Parquet files into the table directory (a Python data source writer,
:class:`DeltaBatchWriter`; nothing travels to the driver but each task's commit message, naming
its files); the driver commits them with ``create_write_transaction(mode="overwrite",
partition_filters=[("eh_batch", "in", keys)])``: the batch's old files are removed and the new
ones added in one transaction. Files of a crashed attempt are never in the log, and the commit
checks that every file it adds exists with the rows its task reported.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timezone
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceWriter,
    WriterCommitMessage,
)

from dagster_eventhub_ingest.ops.sinks.arrow_writer import ArrowBatchWriter
from dagster_eventhub_ingest.ops.sinks.batch import BATCH_COLUMN
from dagster_eventhub_ingest.ops.sinks.failures import failure_cause, sink_error
from dagster_eventhub_ingest.ops.sinks.parquet_files import (
    NULL_DIRECTORY,
    PartitionedParquetFiles,
    keyed_rows,
    unreadable_file,
)
from dagster_eventhub_ingest.ops.sinks.read import delta_arrow_schema
from dagster_eventhub_ingest.ops.sinks.storage import delta_uri
from dagster_eventhub_ingest.resources.errors import SinkError
from dagster_eventhub_ingest.resources.eventhubs_source.source import register_python_source
from dagster_eventhub_ingest.resources.sink import SinkSettings

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

logger = logging.getLogger(__name__)

__all__ = [
    "DELTA_WRITER_SOURCE",
    "DeltaBatchSource",
    "DeltaBatchWriter",
    "DeltaPart",
    "DeltaTaskMessage",
    "delta_batch_writer",
    "write_deltalake",
]


#: Internal Python data source that writes a batch into a Delta table with delta-rs.
DELTA_WRITER_SOURCE = "ehingest_deltalake"


@dataclass(frozen=True)
class DeltaPart:
    """One Parquet file a task wrote (relative path, as the Delta log records it)."""

    path: str
    size: int
    partition_values: dict[str, str | None]
    num_records: int
    stats: str
    modification_time: int


@dataclass(frozen=True)
class DeltaTaskMessage(WriterCommitMessage):
    """What a task reports to the commit: its files and rows outside the batch ranges."""

    parts: tuple[DeltaPart, ...]
    outside: int


class DeltaBatchWriter(ArrowBatchWriter):
    """Tasks write Parquet files into the table directory; ``commit`` makes them one Delta
    transaction replacing the batch's partitions."""

    def _schema(self) -> pa.Schema:
        from pyspark.sql.types import StructType

        return delta_arrow_schema(StructType.fromJson(json.loads(self.schema_json)))

    def write(self, iterator: Iterator[pa.RecordBatch]) -> DeltaTaskMessage:
        """Write this task's rows, one file per partition-value combination, batch by batch."""
        import time
        import urllib.parse

        schema = self._schema()
        cols = self.partition_cols
        filesystem, root = self._filesystem()
        file_stats: dict[tuple[str | None, ...], dict[str, Any]] = {}
        outside = 0
        with PartitionedParquetFiles(
            filesystem,
            root,
            cols,
            self.attempt,
            lambda v: NULL_DIRECTORY if v is None else urllib.parse.quote(v),
        ) as files:
            for batch in iterator:
                # Rows outside the batch ranges have no key: count them, never write them.
                table, skipped = keyed_rows(batch, schema)
                outside += skipped
                for values, part in files.write(table):
                    _file_min_max(file_stats.setdefault(values, {}), part)
        now_ms = int(time.time() * 1000)
        parts = []
        for values, written in files.files.items():
            fstats = file_stats[values]
            parts.append(
                DeltaPart(
                    path=written.rel,
                    size=int(filesystem.get_file_info(written.full).size or 0),
                    partition_values=dict(zip(cols, values, strict=True)),
                    num_records=written.rows,
                    stats=json.dumps(
                        {
                            "numRecords": written.rows,
                            "minValues": fstats.get("min", {}),
                            "maxValues": fstats.get("max", {}),
                            "nullCount": {},
                        }
                    ),
                    modification_time=now_ms,
                )
            )
        return DeltaTaskMessage(parts=tuple(parts), outside=outside)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Replace the batch's partitions by the new files in one Delta transaction."""
        from deltalake import DeltaTable
        from deltalake.transaction import AddAction, RemoveAction

        msgs = [m for m in messages if isinstance(m, DeltaTaskMessage)]
        if sum(m.outside for m in msgs):
            # Never commit a wrong DataFrame; write_batch reports it from the observed count
            # (an exception raised here would reach the caller as a Python worker traceback).
            self.abort(list(messages))
            return
        actions: list[AddAction | RemoveAction] = [
            AddAction(
                path=p.path,
                size=p.size,
                partition_values=p.partition_values,
                modification_time=p.modification_time,
                data_change=True,
                stats=p.stats,
            )
            for m in msgs
            for p in m.parts
        ]
        if not actions:
            # Nothing readable (all skipped): keep what an earlier attempt of the batch wrote,
            # as the Spark formats do, rather than replacing it with nothing.
            return
        problem = self._unreadable_part(msgs)
        if problem is not None:
            self.abort(list(messages))
            raise SinkError(
                f"sink deltalake path {self.location!r}: not committing batch {self.keys}: "
                f"{problem}. The executors wrote where this driver cannot read (a local path on "
                "a cluster?): use a location every node shares (abfss://..., a mounted volume)"
            )
        DeltaTable(
            self.location, storage_options=self.storage_options or None
        ).create_write_transaction(
            actions,
            mode="overwrite",
            schema=self._schema(),
            partition_by=self.partition_cols,
            partition_filters=[(BATCH_COLUMN, "in", self.keys)],
        )

    def _unreadable_part(self, msgs: list[DeltaTaskMessage]) -> str | None:
        """Why a file the tasks reported is not committable here (missing, unreadable, other
        row count), or None when every file exists with its rows."""
        filesystem, root = self._filesystem()
        for m in msgs:
            for p in m.parts:
                problem = unreadable_file(
                    filesystem, f"{root.rstrip('/')}/{p.path}", p.path, p.num_records
                )
                if problem is not None:
                    return problem
        return None

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Delete the files of this attempt (best effort: they are not in the log anyway)."""
        filesystem, root = self._filesystem()
        for m in messages:
            if isinstance(m, DeltaTaskMessage):
                for p in m.parts:
                    try:
                        filesystem.delete_file(f"{root.rstrip('/')}/{p.path}")
                    except OSError:
                        logger.debug("could not delete orphan Delta part %s", p.path)


class DeltaBatchSource(DataSource):
    """``df.write.format("ehingest_deltalake")``: the writer side of the ``deltalake`` sink."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return DELTA_WRITER_SOURCE

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """A writer for one batch; the batch keys and table come in the options."""
        return DeltaBatchWriter(
            location=self.options["table_uri"],
            partition_cols=json.loads(self.options["partition_by"]),
            schema_json=schema.json(),
            keys=json.loads(self.options["keys"]),
            storage_options=json.loads(self.options.get("storage_secret_options", "{}")),
        )


def _min_opt(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else min(a, b)


def _max_opt(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else max(a, b)


def _file_min_max(acc: dict[str, Any], part: pa.Table) -> None:
    """Delta file statistics for data skipping on sequenceNumber and enqueuedTime."""
    import pyarrow.compute as pc

    mins = acc.setdefault("min", {})
    maxs = acc.setdefault("max", {})
    if "sequenceNumber" in part.column_names:
        seq = part.column("sequenceNumber")
        mins["sequenceNumber"] = _min_opt(mins.get("sequenceNumber"), pc.min(seq).as_py())
        maxs["sequenceNumber"] = _max_opt(maxs.get("sequenceNumber"), pc.max(seq).as_py())
    if "enqueuedTime" in part.column_names:
        col = part.column("enqueuedTime")
        lo, hi = pc.min(col).as_py(), pc.max(col).as_py()
        if lo is not None and hi is not None:
            lo_s = lo.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            hi_s = hi.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            mins["enqueuedTime"] = min(mins.get("enqueuedTime", lo_s), lo_s)
            maxs["enqueuedTime"] = max(maxs.get("enqueuedTime", hi_s), hi_s)


def delta_batch_writer(sink: SinkSettings, keys: list[str], schema: StructType) -> DeltaBatchWriter:
    """The writer of one batch (``keys``) of rows of ``schema`` into the sink's Delta table,
    which is created here if it does not exist yet (and refused if partitioned otherwise)."""
    from deltalake import DeltaTable

    assert sink.path is not None
    table_uri = delta_uri(sink.path)
    partition_cols = [*sink.partition_by, BATCH_COLUMN]
    try:
        dt = DeltaTable.create(
            table_uri,
            schema=delta_arrow_schema(schema),
            mode="ignore",
            partition_by=partition_cols,
            storage_options=dict(sink.storage_options) or None,
        )
    except Exception as exc:
        raise sink_error(
            f"sink deltalake path {table_uri!r}: cannot create or open the Delta table: "
            f"{failure_cause(exc)}; check that the path is writable",
            exc,
        ) from exc
    existing = list(dt.metadata().partition_columns)
    if existing != partition_cols:
        raise SinkError(
            f"sink deltalake path {table_uri!r}: the table is partitioned by {existing}, this "
            f"writer needs {partition_cols} (partition_by + {BATCH_COLUMN!r}); write to a new "
            "path or use the same partition_by"
        )
    return DeltaBatchWriter(
        location=table_uri,
        partition_cols=partition_cols,
        schema_json=schema.json(),
        keys=keys,
        storage_options=dict(sink.storage_options),
    )


def write_deltalake(keyed: DataFrame, sink: SinkSettings, keys: list[str]) -> None:
    """Write ``keyed`` (the batch's rows with their batch key) through Spark's tasks
    (:class:`DeltaBatchSource`), then commit them as one transaction."""
    writer = delta_batch_writer(sink, keys, keyed.schema)
    register_python_source(keyed.sparkSession, DeltaBatchSource)
    (
        keyed.write.format(DELTA_WRITER_SOURCE)
        .mode("append")
        .option("table_uri", writer.location)
        .option("partition_by", json.dumps(writer.partition_cols))
        .option("keys", json.dumps(keys))
        # The key holds "secret" so Spark redacts the value in plans and logs.
        .option("storage_secret_options", json.dumps(writer.storage_options))
        .save()
    )
