"""The run's read and write in one pass: each reader task writes the Arrow batches it reads.

Reading into a DataFrame and writing that through a Python writer (``deltalake``) makes the JVM
turn every event from Arrow into a row and back into Arrow (5-6 us of task CPU an event, none
of it writing bytes). Here an internal Python data source (:class:`FusedSource`) has exactly the
``eventhubs`` read's input partitions (the same plan, read by the same
:func:`~dagster_eventhub_ingest.resources.eventhubs_source.read.read_input_partition`: progress,
read statistics and errors as in any read); its reader adds the batch key (and the source, in
a shared sink) to each batch and feeds them to the batch's writer (``write``), and yields one
row: the writer's commit message, the rows it was given and what the reader read. The driver
collects those rows, one per input partition, and commits them (``commit``; ``abort`` on
failure); then the batch is verified and counted as :func:`write_batch
<dagster_eventhub_ingest.ops.sinks.write.write_batch>` does (:func:`finish_batch
<dagster_eventhub_ingest.ops.sinks.write.finish_batch>`).

Exactly once: a task attempt that fails after writing files never reaches the commit (its
files are in no log); Spark keeps one result per partition, so a speculative or re-run
attempt's message is dropped; nothing is visible before the commit.

:func:`fused_writer` chooses the sinks this applies to (a ``deltalake`` path, and a ``parquet``
path :func:`~dagster_eventhub_ingest.ops.sinks.parquet_writer.parquet_fused_applies` takes);
for the others the run reads into a DataFrame and :func:`write_batch` writes it.
"""

from __future__ import annotations

import base64
import logging
import pickle
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)

from dagster_eventhub_ingest.ops.sinks.batch import BATCH_COLUMN, SOURCE_COLUMN
from dagster_eventhub_ingest.resources.sink import DELTALAKE_FORMAT, SinkSettings

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from dagster_eventhub_ingest.ops.sinks.source import SinkSource
    from dagster_eventhub_ingest.ops.sinks.write import BatchTarget, WriteResult
    from dagster_eventhub_ingest.resources.eventhubs_source.options import ReadOptions
    from dagster_eventhub_ingest.resources.eventhubs_source.stats import SubRangeKey, SubRangeStats
    from dagster_eventhub_ingest.resources.ranges import SeqRange

__all__ = [
    "FUSED_SOURCE",
    "FusedBatch",
    "FusedSource",
    "FusedTask",
    "fused_read",
    "fused_writer",
    "fuses",
]

logger = logging.getLogger(__name__)

#: Internal Python data source: the ``eventhubs`` read whose tasks write what they read.
FUSED_SOURCE = "ehingest_fused"
#: The option holding the pickled :class:`_Job` ("secret" in the key: Spark redacts its value in
#: plans and logs; the writer may hold storage credentials).
_JOB_OPTION = "job_secret"
#: The one column of the fused read: a pickled :class:`FusedTask` per input partition.
_TASK_COLUMN = "task"


def fuses(sink: SinkSettings, spark: SparkSession) -> bool:
    """Whether the run writes ``sink``'s batches from its reader tasks on ``spark``
    (:func:`fused_writer` gives a writer for it)."""
    return _opener(sink, spark) is not None


def fused_writer(
    sink: SinkSettings, keys: list[str], schema: StructType, spark: SparkSession
) -> DataSourceArrowWriter | None:
    """The writer of one batch (``keys``) whose rows have ``schema`` (the events, the source in
    a shared sink, the batch key); None where the run writes through a DataFrame instead.

    Any picklable ``DataSourceArrowWriter`` serves: ``write`` runs in each reader task, with
    that task's batches; ``commit`` and ``abort`` on the driver, with the tasks' messages.
    """
    opener = _opener(sink, spark)
    return None if opener is None else opener(sink, keys, schema)


def _opener(
    sink: SinkSettings, spark: SparkSession
) -> Callable[[SinkSettings, list[str], StructType], DataSourceArrowWriter] | None:
    """The one place choosing the sinks the reader tasks write, and their writer's opener
    (``(sink, keys, schema) -> writer``: it may create the table, before anything is read).

    The commit runs in this process: a ``deltalake`` table is opened here on any session (as
    :func:`~dagster_eventhub_ingest.ops.sinks.delta_writer.write_deltalake` opens it); a
    ``parquet`` path's files are checked and renamed here, so only where this process is
    Spark's driver (:func:`~dagster_eventhub_ingest.ops.sinks.checks.driver_sees_path`)."""
    if sink.path is None:
        return None
    if sink.format == DELTALAKE_FORMAT:
        from dagster_eventhub_ingest.ops.sinks.delta_writer import delta_batch_writer

        return delta_batch_writer
    from dagster_eventhub_ingest.ops.sinks.checks import driver_sees_path
    from dagster_eventhub_ingest.ops.sinks.parquet_writer import (
        ParquetBatchWriter,
        parquet_fused_applies,
    )
    from dagster_eventhub_ingest.ops.sinks.read import output_schema

    if driver_sees_path(sink, spark) and parquet_fused_applies(sink, output_schema(sink.sources)):
        return ParquetBatchWriter.for_sink
    return None


@dataclass(frozen=True)
class FusedTask:
    """What one reader task tells the driver: its writer's commit message, the rows it wrote,
    and what it read (its sub-range and statistics; None when it read another source's
    partition)."""

    message: WriterCommitMessage | None
    rows: int
    read: tuple[SubRangeKey, SubRangeStats] | None


@dataclass(frozen=True)
class _Job:
    """What every reader task needs besides its partition: the batch's writer, the batch key
    of each Event Hub partition, and the source's name in a shared sink (else None)."""

    writer: DataSourceArrowWriter
    keys: dict[str, str]
    source_name: str | None

    def __repr__(self) -> str:
        return f"_Job({self.writer!r}, keys={self.keys})"

    def run(self, partition: InputPartition) -> FusedTask:
        """Read ``partition`` and write it; the task's row for the driver."""
        import pyarrow as pa

        from dagster_eventhub_ingest.resources.eventhubs_source.read import read_input_partition

        done: list[SubRangeStats] = []
        batches = read_input_partition(partition, on_done=done.append)
        rng = getattr(partition, "range", None)
        rows = 0

        def keyed() -> Iterator[pa.RecordBatch]:
            nonlocal rows
            if rng is None:  # not an Event Hubs partition: it read nothing
                return
            key = pa.scalar(self.keys[rng.partition_id], pa.string())
            source = None if self.source_name is None else pa.scalar(self.source_name, pa.string())
            for batch in batches:
                n = batch.num_rows
                rows += n
                if source is not None:
                    batch = batch.append_column(SOURCE_COLUMN, pa.repeat(source, n))
                yield batch.append_column(BATCH_COLUMN, pa.repeat(key, n))

        message = self.writer.write(keyed())
        read = None
        if rng is not None and done:
            read = ((rng.partition_id, rng.start, rng.end), done[0])
        return FusedTask(message, rows, read)


class FusedReader(DataSourceReader):
    """The ``eventhubs`` reader's partitions; each task reads, writes, and yields one row."""

    def __init__(self, events: DataSourceReader, job: _Job) -> None:
        self.events = events
        self.job = job

    def partitions(self) -> list[InputPartition]:
        """Exactly the ``eventhubs`` read's input partitions."""
        return list(self.events.partitions())

    def read(self, partition: InputPartition) -> Iterator[tuple[bytes]]:
        """Read and write one sub-range; one row, the pickled :class:`FusedTask`."""
        yield (pickle.dumps(self.job.run(partition)),)


class FusedSource(DataSource):
    """``spark.read.format("ehingest_fused")``: the ``eventhubs`` source's options plus the
    pickled job; see the module docstring."""

    def __init__(self, options: dict[str, str]) -> None:
        from dagster_eventhub_ingest.resources.eventhubs_source.source import EventHubsDataSource

        rest = dict(options)
        raw = rest.pop(_JOB_OPTION)
        self.job: _Job = pickle.loads(base64.b64decode(raw))
        self.events = EventHubsDataSource(rest)
        super().__init__({})  # the options hold secrets twice; the job and plan hold them

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return FUSED_SOURCE

    def schema(self) -> str:
        """One binary column: a task's pickled :class:`FusedTask`."""
        return f"{_TASK_COLUMN} binary"

    def reader(self, schema: StructType) -> DataSourceReader:
        """The ``eventhubs`` reader of the same options, writing what it reads."""
        return FusedReader(self.events.reader(self.events.schema()), self.job)


@dataclass(frozen=True)
class FusedBatch:
    """A batch planned for a fused read and write; :meth:`write` runs it."""

    frame: DataFrame
    writer: DataSourceArrowWriter
    sink: SinkSettings
    target: BatchTarget
    skips: bool

    def write(self) -> WriteResult:
        """Run the reader tasks, commit their messages (``abort`` on a failure), then verify
        and count the batch as ``write_batch`` does.

        Raises:
            SinkError: the tasks or the commit failed (a reader's own error is its cause),
                or the verification did.
            ConfigurationError: the project's code is missing on the executors.
        """
        from dagster_eventhub_ingest.ops.sinks.staging import wait_for_running_tasks
        from dagster_eventhub_ingest.ops.sinks.statistics import row_from_readers
        from dagster_eventhub_ingest.ops.sinks.write import finish_batch, write_failure
        from dagster_eventhub_ingest.resources.errors import ConfigurationError, SinkError
        from dagster_eventhub_ingest.resources.eventhubs_source.schema import eventhubs_schema

        tasks: list[FusedTask] = []
        try:
            tasks = [pickle.loads(row[0]) for row in self.frame.collect()]
            messages = [t.message for t in tasks]
            try:
                self.writer.commit(messages)
            except BaseException:
                self.writer.abort(messages)
                raise
        except (SinkError, ConfigurationError):
            raise
        except Exception as exc:
            if not tasks:
                # The job failed: no task's message reached here; a writer may still clean up
                # by its own convention (its attempt's staging), once a task Spark was still
                # stopping can no longer write behind it. A commit failure aborted above.
                wait_for_running_tasks(self.frame.sparkSession, timeout=10.0)
                _abort_quietly(self.writer)
            raise write_failure(exc, self.sink, self.target) from exc
        read = {t.read[0]: t.read[1] for t in tasks if t.read is not None}
        # A read that may skip expired events has fewer rows than its ranges: its statistics
        # are of what its readers read (the verification compares the rows they wrote).
        reader_row = row_from_readers(read, self.target.ranges, complete=not self.skips)
        return finish_batch(
            self.frame.sparkSession,
            self.sink,
            self.target,
            "reader" if reader_row is not None else "readback",
            sum(t.rows for t in tasks),
            metrics_row={},
            reader_row=reader_row,
            schema=eventhubs_schema(),
        )


def _abort_quietly(writer: DataSourceArrowWriter) -> None:
    try:
        writer.abort([])
    except Exception:
        logger.warning("aborting the failed batch write of %r failed", writer, exc_info=True)


def fused_read(
    spark: SparkSession,
    options: ReadOptions,
    sink: SinkSettings,
    ranges: Mapping[str, SeqRange],
    *,
    generations: Mapping[str, int] | None = None,
    source: SinkSource | None = None,
) -> FusedBatch | None:
    """The fused read and write of ``ranges`` (read with ``options``) into ``sink``, planned
    (the ranges checked against the service, as ``read_eventhubs`` does) but not run; None
    when the sink is not written this way (:func:`fused_writer`).

    Raises:
        ConfigurationError, SinkError: the sink cannot take the batch (before anything is read).
        Planner errors of the ``eventhubs`` source, as ``read_eventhubs`` raises them.
    """
    if not fuses(sink, spark):
        return None
    from pyspark import cloudpickle

    from dagster_eventhub_ingest.ops.sinks.read import output_schema
    from dagster_eventhub_ingest.ops.sinks.write import batch_target, check_partition_by
    from dagster_eventhub_ingest.resources.eventhubs_source.source import register_python_source
    from dagster_eventhub_ingest.resources.settings import EVENT_FIELDS

    target = batch_target(spark, sink, ranges, generations, source)
    check_partition_by(sink, [name for name, _ in EVENT_FIELDS])
    writer = fused_writer(sink, list(target.keys.values()), output_schema(sink.sources), spark)
    assert writer is not None
    shared = target.shared_by
    job = _Job(writer, dict(target.keys), None if shared is None else shared.name)
    register_python_source(spark, FusedSource)
    frame = (
        spark.read.format(FUSED_SOURCE)
        .options(**options.to_options())
        .option(_JOB_OPTION, base64.b64encode(cloudpickle.dumps(job)).decode("ascii"))
        .load()
    )
    # Spark Connect creates the source lazily, when the plan is first analysed: here, so its
    # planner errors come from this call.
    _ = frame.columns
    return FusedBatch(frame, writer, sink, target, skips=options.on_data_loss == "skip")
