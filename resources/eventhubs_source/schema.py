"""The ``eventhubs`` source's schema, as Spark declares it and as Arrow batches must match it."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

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


def source_arrow_schema() -> pa.Schema:
    # Exactly what Spark's data source worker checks batches against.
    return arrow_schema(eventhubs_schema())


def arrow_schema(schema: StructType) -> pa.Schema:
    """PySpark's Arrow schema of ``schema``, timestamps in UTC (the sessions' time zone).

    PySpark 4.0 asks for it with ``timestamp_utc=True``, 4.1 and later with ``timezone="UTC"``;
    both give ``timestamp[us, tz=UTC]``.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    convert: Callable[..., pa.Schema] = to_arrow_schema
    if _takes_timezone(convert):
        return convert(schema, timezone="UTC")
    return convert(schema, timestamp_utc=True)


@functools.cache
def _takes_timezone(function: Callable[..., Any]) -> bool:
    return "timezone" in inspect.signature(function).parameters
