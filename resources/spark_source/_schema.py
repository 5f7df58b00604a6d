"""The ``eventhubs`` source's schema, as Spark declares it and as Arrow batches must match it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType


def eventhubs_schema() -> StructType:
    """The DataFrame schema of the ``eventhubs`` source (azure-event-hubs-spark column names)."""
    from pyspark.sql.types import (
        BinaryType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType(
        [
            StructField("body", BinaryType()),
            StructField("partition", StringType()),
            StructField("offset", StringType()),
            StructField("sequenceNumber", LongType()),
            StructField("enqueuedTime", TimestampType()),
            StructField("publisher", StringType()),
            StructField("partitionKey", StringType()),
            StructField("properties", MapType(StringType(), StringType())),
            StructField("systemProperties", MapType(StringType(), StringType())),
            # Not the connector's: an amqp-value / amqp-sequence body (body is null then), or a
            # message that is not valid AMQP, as received (docs/spark_source.md).
            StructField("amqpBody", BinaryType()),
        ]
    )


def _arrow_schema() -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    # Exactly what Spark's data source worker checks batches against.
    return to_arrow_schema(eventhubs_schema(), timezone="UTC")
