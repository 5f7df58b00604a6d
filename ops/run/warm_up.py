"""A run's Spark path in miniature, to warm a session up or record what its JVM loads.

* :func:`warm_up`: ``ehingest spark-archive`` runs it in a JVM that writes a class-data archive
  at exit (:mod:`dagster_eventhub_ingest.resources.spark.jvm_archive`): the archive then holds the
  classes of a real run's path (a Python data source of the ``eventhubs`` schema read into Arrow,
  :func:`dagster_eventhub_ingest.ops.sinks.write.write_batch`'s observed, filtered, batch-keyed and
  partitioned write and its read-back verification) without a hub to read from.
* :func:`warm_session`: a running session's executors start their Python workers, with the
  reader's imports, before the run's first read needs them
  (``dagster_eventhub_ingest.ops.run.ingestor.SparkIngestor``).
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dagster_eventhub_ingest.resources.spark.kind import SessionMarks

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["warm_python", "warm_session", "warm_up"]

logger = logging.getLogger(__name__)

#: Events per partition of the warm-up's batches.
_EVENTS = 50


def warm_up(spark: SparkSession, workdir: Path) -> int:
    """Write three batches of made-up events through
    :func:`dagster_eventhub_ingest.ops.sinks.write.write_batch` into a Parquet sink under
    ``workdir``: 2 partitions (statistics observed), 8 (read back) and 4 (told by the readers
    through an accumulator, as a run on a classic session); the events written."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from dagster_eventhub_ingest.ops.sinks.write import write_batch
    from dagster_eventhub_ingest.resources.eventhubs_source.schema import (
        eventhubs_schema,
        source_arrow_schema,
    )
    from dagster_eventhub_ingest.resources.eventhubs_source.stats import read_stats_accumulator
    from dagster_eventhub_ingest.resources.ranges import SeqRange
    from dagster_eventhub_ingest.resources.sink import SinkSettings

    class _Reader(DataSourceReader):
        def __init__(self, partitions: int, read_stats: int | None) -> None:
            self.count = partitions
            self.read_stats = read_stats

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(p) for p in range(self.count)]

        def read(self, partition: InputPartition) -> Any:
            # Through the reader's own builder, as SDK events with the service's annotations.
            from azure.eventhub import EventData

            from dagster_eventhub_ingest.resources.eventhubs_source.events import ArrowBuilder

            builder = ArrowBuilder(str(partition.value), source_arrow_schema())
            for i in range(_EVENTS):
                event = EventData(b"warm-up event" * 8)
                event.properties = {"kind": "warm-up"}
                event.raw_amqp_message.annotations = {
                    b"x-opt-offset": str(4096 * i).encode(),
                    b"x-opt-sequence-number": i,
                    b"x-opt-enqueued-time": 1_700_000_000_000 + i,
                    b"x-opt-partition-key": b"key",
                }
                builder.add(event, i)
            yield builder.flush()
            if self.read_stats is not None:
                from dagster_eventhub_ingest.resources.eventhubs_source.stats import send_read_stats

                key = (str(partition.value), 0, _EVENTS - 1)
                send_read_stats(self.read_stats, key, builder.summary())

    class _Source(DataSource):
        @classmethod
        def name(cls) -> str:
            return "ehingest_warm_up"

        def schema(self) -> Any:
            return eventhubs_schema()

        def reader(self, schema: Any) -> DataSourceReader:
            aid = self.options.get("read_stats")
            return _Reader(int(self.options.get("partitions", "2")), int(aid) if aid else None)

    spark.dataSource.register(_Source)
    sink = SinkSettings(format="parquet", path=str(workdir / "warm-up"))
    written = 0
    for partitions, by_readers in ((2, False), (8, False), (4, True)):
        ranges = {str(p): SeqRange(0, _EVENTS - 1) for p in range(partitions)}
        reader = spark.read.format(_Source.name()).option("partitions", str(partitions))
        if not by_readers:
            written += write_batch(reader.load(), sink, ranges).events
            continue
        with read_stats_accumulator(spark) as acc:
            assert acc is not None  # a classic session
            df = reader.option("read_stats", str(acc.aid)).load()
            result = write_batch(df, sink, ranges, read_stats=partial(getattr, acc, "value"))
        written += result.events
    return written


def _import_reader(batches: Any) -> Any:
    """A worker's first task: import what the ``eventhubs`` reader needs (pyarrow, the
    reader's receiver and its native step; not the Azure SDK: the reader talks AMQP itself and
    the management calls are the planner's, another process); one row, the worker's pid, per
    batch."""
    import os

    import pyarrow as pa

    import dagster_eventhub_ingest.resources.eventhubs_source.read  # noqa: F401
    from dagster_eventhub_ingest.resources.eventhubs_source.arrow import int64_array
    from dagster_eventhub_ingest.resources.eventhubs_source.fastpath.loader import amqp_columns

    amqp_columns()  # loaded (or built) once per worker, before the first read
    for _batch in batches:
        # Built from buffers, as the reader builds its batches: pa.array would import pandas.
        pid = int64_array([os.getpid()], pa.int64())
        yield pa.RecordBatch.from_arrays([pid], schema=_batch.schema)


def _map_in_arrow(df: DataFrame, func: Any) -> DataFrame:
    """``df.mapInArrow(func, df.schema)`` without importing pandas on the driver.

    ``mapInArrow`` builds its function through ``pandas_udf``, which checks the installed
    pandas version for every call and so imports pandas: 0.3-0.4 s of CPU in the middle of
    the run's warm-up, in a driver that never uses it (the read's own plan does not). The same
    function of the same eval type, as ``mapInArrow`` hands it to the JVM, built directly.
    """
    from pyspark.sql import DataFrame
    from pyspark.sql.udf import UserDefinedFunction
    from pyspark.util import PythonEvalType

    udf = UserDefinedFunction(
        func, returnType=df.schema, evalType=PythonEvalType.SQL_MAP_ARROW_ITER_UDF
    )
    column = udf(*[df[name] for name in df.columns])
    return DataFrame(df._jdf.mapInArrow(column._jc, False, None), df.sparkSession)


def warm_python(spark: SparkSession, *, with_planners: bool = False) -> set[int]:
    """Start the executors' Python workers a read will use, with its imports, without reading.

    A first read's tasks wait for Spark to start the Python worker daemon, fork a worker per
    task slot and have each import pyarrow and the reader, after the source's
    own planning steps, one after another. A small Arrow job (the read's kind of Python
    function: the workers of another kind are another daemon's) over as many partitions as
    the session has task slots does that beforehand (the run: on a thread, while it claims
    and plans); Spark keeps the workers (``spark.python.worker.reuse``) for the read's tasks.
    ``with_planners``: meanwhile, on another thread, also start the Python daemons that create
    and plan a data source (:func:`_warm_planners`). Returns the workers' pids.
    """
    import threading

    planners = None
    if with_planners:
        planners = threading.Thread(target=_warm_planners, args=(spark,), daemon=True)
        planners.start()
    slots = max(1, int(spark.sparkContext.defaultParallelism))
    df = spark.range(0, slots, 1, slots)
    pids = {int(row.id) for row in _map_in_arrow(df, _import_reader).collect()}
    if planners is not None:
        planners.join()
    return pids


def _warm_planners(spark: SparkSession) -> None:
    """Create and plan a Python data source without reading it: Spark starts the daemons that
    create and plan the ``eventhubs`` source (one Python process each, ~0.6 s apiece cold)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
    from pyspark.sql.types import IntegerType, StructField, StructType

    from dagster_eventhub_ingest.resources.eventhubs_source import register_python_source

    class _Reader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(0)]

        def read(self, partition: InputPartition) -> Any:
            return iter(())

    class _Source(DataSource):
        @classmethod
        def name(cls) -> str:
            return "ehingest_warm_planners"

        def schema(self) -> StructType:
            return StructType([StructField("id", IntegerType())])

        def reader(self, schema: StructType) -> DataSourceReader:
            return _Reader()

    try:
        register_python_source(spark, _Source)
        spark.read.format(_Source.name()).load().rdd.getNumPartitions()
    except Exception:
        logger.debug("warming the data source planners failed", exc_info=True)


_WARMED = SessionMarks()


def warm_session(spark: SparkSession, *, with_planners: bool = False) -> None:
    """:func:`warm_python` once per classic session, best effort (a failure is only logged:
    the read that follows starts what it needs itself). Spark Connect sessions are skipped:
    their Python workers are the server's.

    ``with_planners`` for a session that was already running when the run began: the run's
    join grace is then idle time (in-process 100k run 7.4-7.8 -> 7.1-7.4 s). Beside a JVM the
    run starts, the planners' daemons only raced the run's own (no gain, more CPU)."""
    from dagster_eventhub_ingest.resources.spark.kind import is_connect_session

    if is_connect_session(spark) or spark in _WARMED:
        return
    _WARMED.add(spark)
    try:
        from dagster_eventhub_ingest.resources.spark.code_shipping import ship_code
        from dagster_eventhub_ingest.resources.spark.session import make_active

        make_active(spark)
        ship_code(spark)  # a cluster's workers import the reader from the project's code
        warm_python(spark, with_planners=with_planners)
    except Exception:
        logger.debug("warming the session's Python workers failed", exc_info=True)
