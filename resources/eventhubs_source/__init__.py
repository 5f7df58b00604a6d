"""The ``eventhubs`` PySpark data source: exact, bounded sequence-number ranges as a DataFrame.

Usage::

    register_eventhubs_source(spark)
    df = (
        spark.read.format("eventhubs")
        .option("connection_string", conn)  # or fully_qualified_namespace + credential_type
        .option("eventhub_name", "telemetry")
        .option("ranges", '{"0": [100, 199], "1": [0, 49]}')  # inclusive; or positions:
        # .option("starting_position", "earliest").option("ending_position", "latest")
        .load()
    )

How it reads (see docs/spark_source.md):

* Everything that talks to the service before reading happens when the DataFrame is created
  (``load()``, in Spark's planner worker on the driver): options are validated, positions are
  resolved to sequence numbers from ``get_partition_properties`` (and, for offsets and enqueued
  times, one probe receive), explicit ranges are checked against the partition ids and the
  retained sequence numbers. The resolved ranges are stored in the pickled data source, so every
  action on the same DataFrame reads exactly the same events, even if ``latest`` moved on.
* Each range becomes up to ``max_readers_per_partition`` input partitions (sub-ranges). A task
  creates its own ``EventHubConsumerClient`` inside ``read()`` (only the frozen
  :class:`~dagster_eventhub_ingest.resources.settings.EventHubSettings` and the range are pickled),
  receives from the start sequence number inclusive until the end sequence number, and yields Arrow
  record batches.
* A sequence number that cannot be read (expired by retention, or a gap) raises
  :class:`~dagster_eventhub_ingest.resources.errors.DataLossError` naming partition and range,
  unless ``on_data_loss=skip``: then the readable part is read, and the driver learns the skipped
  parts from :attr:`ReadPlan.gaps` (retention, known before reading) or from the write statistics
  (an event count below the range size, see ``dagster_eventhub_ingest.ops.sinks.statistics``).

One concept per module; this face re-exports the public names:

* ``partition_range``: :class:`PartitionRange`, :class:`DataGap`, parsing and splitting ranges;
* ``position``: :class:`EventPosition`; ``options``: :class:`ReadOptions`;
* ``plan``: :class:`ReadPlan`, :func:`plan_read` (driver side);
* ``receiver``, ``events``, ``read``: the bounded receive into Arrow batches (executor side), with
  ``message`` and ``values`` (an AMQP message as one row, the connector's text of a value) and
  ``arrow`` (Arrow arrays without pandas);
* ``schema``: the DataFrame schema; ``source``: the data source and its registration;
  ``stream``: ``spark.readStream``; ``stats``: what readers tell the driver they read;
  ``progress``: live read progress through the partition store;
* ``compat/``: azure-event-hubs-spark's and Kafka's options and positions, mapped onto ours;
* ``fastpath/``: the native step (``_amqp_columns.c``) and its loader.

The names load lazily (PEP 562): the driver's modules that only need a range, a position or the
live progress (a run with nothing to read among them) import no pyspark through this face.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_eventhub_ingest.resources.lazy import lazy_face

if TYPE_CHECKING:
    from dagster_eventhub_ingest.resources.eventhubs_source.options import ReadOptions
    from dagster_eventhub_ingest.resources.eventhubs_source.partition_range import (
        DataGap,
        PartitionRange,
        parse_ranges,
        split_range,
    )
    from dagster_eventhub_ingest.resources.eventhubs_source.plan import (
        ReadPlan,
        input_partitions,
        plan_read,
    )
    from dagster_eventhub_ingest.resources.eventhubs_source.position import EventPosition
    from dagster_eventhub_ingest.resources.eventhubs_source.read import (
        EventHubsInputPartition,
        read_range,
    )
    from dagster_eventhub_ingest.resources.eventhubs_source.schema import eventhubs_schema
    from dagster_eventhub_ingest.resources.eventhubs_source.source import (
        SOURCE_NAME,
        EventHubsDataSource,
        read_eventhubs,
        register_eventhubs_source,
        register_python_source,
    )
    from dagster_eventhub_ingest.resources.settings import EVENT_COLUMNS

_HOMES = {
    "EVENT_COLUMNS": "dagster_eventhub_ingest.resources.settings",
    "SOURCE_NAME": ".source",
    "DataGap": ".partition_range",
    "EventHubsDataSource": ".source",
    "EventHubsInputPartition": ".read",
    "EventPosition": ".position",
    "PartitionRange": ".partition_range",
    "ReadOptions": ".options",
    "ReadPlan": ".plan",
    "eventhubs_schema": ".schema",
    "input_partitions": ".plan",
    "parse_ranges": ".partition_range",
    "plan_read": ".plan",
    "read_eventhubs": ".source",
    "read_range": ".read",
    "register_eventhubs_source": ".source",
    "register_python_source": ".source",
    "split_range": ".partition_range",
}

__all__ = [
    "EVENT_COLUMNS",
    "SOURCE_NAME",
    "DataGap",
    "EventHubsDataSource",
    "EventHubsInputPartition",
    "EventPosition",
    "PartitionRange",
    "ReadOptions",
    "ReadPlan",
    "eventhubs_schema",
    "input_partitions",
    "parse_ranges",
    "plan_read",
    "read_eventhubs",
    "read_range",
    "register_eventhubs_source",
    "register_python_source",
    "split_range",
]


__getattr__, __dir__ = lazy_face(__name__, _HOMES)
