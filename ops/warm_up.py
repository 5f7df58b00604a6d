"""A run's Spark path in miniature, to warm a JVM up or record what it loads.

``ehingest spark-archive`` runs it in a JVM that writes a class-data archive at exit
(:mod:`resources.jvm_archive`): the archive then holds the classes of a real run's path (a
Python data source of the ``eventhubs`` schema read into Arrow, :func:`ops.write.write_batch`'s
observed, filtered, batch-keyed and partitioned write and its read-back verification) without a
hub to read from.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["warm_up"]

#: Events per partition of the warm-up's batches.
_EVENTS = 50


def warm_up(spark: SparkSession, workdir: Path) -> int:
    """Write two batches of made-up events through :func:`ops.write.write_batch` into a Parquet
    sink under ``workdir``: 2 partitions (statistics observed) and 8 (read back); the events
    written."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from ops.write import write_batch
    from resources.ranges import SeqRange
    from resources.settings import SinkSettings
    from resources.spark_source._schema import _arrow_schema, eventhubs_schema

    class _Reader(DataSourceReader):
        def __init__(self, partitions: int) -> None:
            self.count = partitions

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(p) for p in range(self.count)]

        def read(self, partition: InputPartition) -> Any:
            import pyarrow as pa

            n = _EVENTS
            yield pa.RecordBatch.from_pydict(
                {
                    "body": [b"warm-up event" * 8] * n,
                    "partition": [str(partition.value)] * n,
                    "offset": [str(4096 * i) for i in range(n)],
                    "sequenceNumber": list(range(n)),
                    "enqueuedTime": [1_700_000_000_000_000 + i for i in range(n)],
                    "publisher": [None] * n,
                    "partitionKey": ["key"] * n,
                    "properties": [[("kind", "warm-up")]] * n,
                    "systemProperties": [[]] * n,
                },
                schema=_arrow_schema(),
            )

    class _Source(DataSource):
        @classmethod
        def name(cls) -> str:
            return "ehingest_warm_up"

        def schema(self) -> Any:
            return eventhubs_schema()

        def reader(self, schema: Any) -> DataSourceReader:
            return _Reader(int(self.options.get("partitions", "2")))

    spark.dataSource.register(_Source)
    sink = SinkSettings(format="parquet", path=str(workdir / "warm-up"))
    written = 0
    for partitions in (2, 8):
        df = spark.read.format(_Source.name()).option("partitions", str(partitions)).load()
        ranges = {str(p): SeqRange(0, _EVENTS - 1) for p in range(partitions)}
        written += write_batch(df, sink, ranges).events
    return written
