"""The ``eventhubs`` source's schema, as Spark declares it and as Arrow batches must match it."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from dagster_eventhub_ingest.resources.settings import EVENT_FIELDS

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType


def eventhubs_schema() -> StructType:
    """The DataFrame schema of the ``eventhubs`` source (azure-event-hubs-spark column names)."""
    return spark_schema(EVENT_FIELDS)


def spark_schema(fields: Iterable[tuple[str, str]]) -> StructType:
    """A Spark schema of nullable columns from ``(name, Spark SQL type)`` pairs
    (:data:`~dagster_eventhub_ingest.resources.settings.EVENT_FIELDS`'s form); without a session,
    so only the types those pairs use."""
    from pyspark.sql.types import (
        BinaryType,
        DataType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    types: dict[str, DataType] = {
        "binary": BinaryType(),
        "string": StringType(),
        "bigint": LongType(),
        "timestamp": TimestampType(),
        "map<string,string>": MapType(StringType(), StringType()),
    }
    return StructType([StructField(name, types[sql], True) for name, sql in fields])


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
