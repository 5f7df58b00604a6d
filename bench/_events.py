"""Events made by Spark for the write benchmarks: the ``eventhubs`` source's columns, laid out
as the source reads them (one Spark partition, a task, per Event Hub partition, each task's rows
one partition's range in sequence order), no Event Hub involved."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["synthetic_events"]


def synthetic_events(
    spark: SparkSession, per: int, partitions: int, size: int, *, incompressible: bool = False
) -> DataFrame:
    """``per`` events in each of ``partitions`` Event Hub partitions, bodies of ``size`` bytes:
    one SHA-256 repeated (snappy shrinks it) or, ``incompressible``, a distinct one for each 32
    bytes."""
    from pyspark.sql import functions as F

    from dagster_eventhub_ingest.resources.eventhubs_source import eventhubs_schema

    schema = eventhubs_schema()
    hexes = max(1, size // 32)
    if incompressible:
        body = (
            f"unhex(concat_ws('', transform(sequence(1, {hexes}), "
            "i -> sha2(concat(cast(id as string), '-', cast(i as string)), 256))))"
        )
    else:
        body = f"unhex(repeat(sha2(cast(id as string), 256), {hexes}))"
    return spark.range(0, per * partitions, 1, partitions).select(
        F.expr(body).alias("body"),
        (F.col("id") / per).cast("long").cast("string").alias("partition"),
        F.col("id").cast("string").alias("offset"),
        (F.col("id") % per).alias("sequenceNumber"),
        F.current_timestamp().alias("enqueuedTime"),
        F.lit(None).cast("string").alias("publisher"),
        F.lit(None).cast("string").alias("partitionKey"),
        F.create_map().cast(schema["properties"].dataType).alias("properties"),
        F.create_map().cast(schema["systemProperties"].dataType).alias("systemProperties"),
    )
