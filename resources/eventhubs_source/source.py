"""The PySpark data source: ``spark.read.format("eventhubs")`` and its registration."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

from dagster_eventhub_ingest.resources.azure.hub_client import EventHubClient
from dagster_eventhub_ingest.resources.errors import (
    DataLossError,
    EventHubIngestError,
    EventHubUnavailableError,
    RangeError,
)
from dagster_eventhub_ingest.resources.eventhubs_source.options import ReadOptions
from dagster_eventhub_ingest.resources.eventhubs_source.plan import ReadPlan
from dagster_eventhub_ingest.resources.eventhubs_source.read import read_input_partition
from dagster_eventhub_ingest.resources.eventhubs_source.schema import eventhubs_schema
from dagster_eventhub_ingest.resources.settings import EventHubSettings
from dagster_eventhub_ingest.resources.spark.kind import SessionMarks

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

SOURCE_NAME = "eventhubs"


class EventHubsReader(DataSourceReader):
    """Batch reader over a resolved :class:`ReadPlan`."""

    def __init__(self, plan: ReadPlan) -> None:
        self.plan = plan

    def partitions(self) -> list[InputPartition]:
        """One input partition per sub-range."""
        return list(self.plan.input_partitions())

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Receive one sub-range on an executor (the client is created here, never pickled)."""
        return read_input_partition(partition)


class EventHubsDataSource(DataSource):
    """``spark.read.format("eventhubs")``: bounded reads of Event Hub sequence-number ranges.

    The options are validated and the ranges resolved when the DataFrame is created; see the
    module docstring and docs/spark_source.md for the options.
    """

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        # The connector's and Kafka's options are mapped (or refused) there; see the module.
        from dagster_eventhub_ingest.resources.eventhubs_source.compat.options import (
            parse_source_options,
        )
        from dagster_eventhub_ingest.resources.eventhubs_source.compat.resolve import (
            plan_source_read,
        )

        self.source = parse_source_options(options)
        parsed = self.source.read
        # Spark builds the source the same way for spark.read and spark.readStream. A stream
        # starts from its checkpoint, not from these positions, so unless the options are
        # batch-only (ranges, an end), what the batch plan finds (an expired start, an
        # unreachable hub) is raised when a batch reader is asked for (the first action),
        # never by readStream...load().
        self.plan_error: EventHubIngestError | None = None
        self.plan = ReadPlan(options=parsed, ranges=())
        if parsed.ranges is None or parsed.ranges:
            try:
                self.plan = plan_source_read(self.source)
            except (RangeError, DataLossError, EventHubUnavailableError) as exc:
                if self.source.batch_only:
                    raise
                self.plan_error = exc
        if parsed.known_bounds is None and not isinstance(
            self.plan_error, EventHubUnavailableError
        ):
            # Management calls do not name the consumer group; a receiver does, minutes later
            # and on an executor. One receiver here says now (unless the ingestion run, which
            # passes known_bounds, checked it already).
            first = self.plan.ranges[0].partition_id if self.plan.ranges else None
            try:
                EventHubClient(parsed.settings, retry_total=None).check_consumer_group(
                    option=parsed.spelled("consumer_group"), partition_id=first
                )
            except EventHubUnavailableError as exc:
                if self.source.batch_only:
                    raise
                self.plan_error = exc
        # Drop the raw options: the plan holds everything, and they hold the secret twice.
        self.options = {}

    @classmethod
    def name(cls) -> str:
        """The format name: ``eventhubs``."""
        return SOURCE_NAME

    def schema(self) -> StructType:
        """The fixed event schema (azure-event-hubs-spark column names)."""
        return eventhubs_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        """A reader over the ranges resolved at creation."""
        refused = self.source.stream_only_error()
        if refused is not None:
            raise refused
        if self.plan_error is not None:
            raise self.plan_error
        return EventHubsReader(self.plan)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """``spark.readStream.format("eventhubs")``: see
        :mod:`dagster_eventhub_ingest.resources.eventhubs_source.stream`."""
        from dagster_eventhub_ingest.resources.eventhubs_source.stream import EventHubsStreamReader

        return EventHubsStreamReader(self.source)


#: Per data source name, the sessions it is registered on.
_REGISTERED: dict[str, SessionMarks] = {}


def register_python_source(spark: SparkSession, source: type[DataSource]) -> None:
    """Register ``source`` on ``spark`` once (Spark warns on every re-registration).

    On a non-local session this first ships the project's code to the executors
    (:func:`dagster_eventhub_ingest.resources.spark.code_shipping.ship_code`), which unpickle
    ``source`` by reference.
    """
    registered = _REGISTERED.setdefault(source.name(), SessionMarks())
    if spark not in registered:
        from dagster_eventhub_ingest.resources.spark.code_shipping import ship_code

        ship_code(spark)
        spark.dataSource.register(source)
        registered.add(spark)


def register_eventhubs_source(spark: SparkSession) -> None:
    """Register the ``eventhubs`` format on ``spark`` (idempotent)."""
    register_python_source(spark, EventHubsDataSource)


def read_eventhubs(
    spark: SparkSession,
    source: ReadPlan | ReadOptions | EventHubSettings,
    **options: Any,
) -> DataFrame:
    """The ``eventhubs`` DataFrame of a plan, validated options, or settings plus options.

    With a :class:`ReadPlan` the DataFrame reads exactly ``plan.ranges``; otherwise the source
    resolves the options itself. Extra keyword ``options`` use the reader option names
    (``ranges`` may be a dict ``{"0": (start, end)}``).
    """
    register_eventhubs_source(spark)
    if isinstance(source, ReadPlan):
        opts = source.spark_options()
    else:
        base = source if isinstance(source, ReadOptions) else ReadOptions(settings=source)
        opts = base.to_options()
        extra = {k: v for k, v in options.items() if v is not None}
        if "ranges" in extra:
            for key in ("starting_position", "ending_position", "partition_ids"):
                opts.pop(key, None)
            if not isinstance(extra["ranges"], str):
                extra["ranges"] = json.dumps(
                    {str(k): [int(v[0]), int(v[1])] for k, v in extra["ranges"].items()}
                )
        elif "starting_position" in extra or "ending_position" in extra:
            opts.pop("ranges", None)
        opts.update({k: str(v) for k, v in extra.items()})
    return spark.read.format(SOURCE_NAME).options(**opts).load()
