"""Running the ``eventhubs`` streaming source as a user does: one ``Trigger.AvailableNow`` query
to its end, into Parquet."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["run_available_now", "run_available_now_once"]


def run_available_now(
    spark: SparkSession, hub: Any, out: Path, checkpoint: Path, **options: str
) -> list[dict[str, Any]]:
    """Run one AvailableNow query to the end; return its progress reports (one per batch).

    Spark gives the driver-side Python runner of a streaming source a fixed 10 s to connect back
    (PythonWorkerFactory, not configurable); on a 2-core machine at load 20 that start can miss
    it before the query read anything. Such a query is started again, as a user would: it
    resumes from its checkpointLocation, so the claims below still hold.
    """
    for attempt in range(3):
        try:
            return run_available_now_once(spark, hub, out, checkpoint, **options)
        except _WorkerStartTimeout:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


class _WorkerStartTimeout(AssertionError):
    """The query failed before reading anything because Spark's Python runner started late."""


def run_available_now_once(
    spark: SparkSession, hub: Any, out: Path, checkpoint: Path, **options: str
) -> list[dict[str, Any]]:
    """One AvailableNow query of ``hub`` into ``out`` (Parquet), started once; its progress
    reports with rows. A failed query raises AssertionError with the source's error."""
    reader = (
        spark.readStream.format("eventhubs")
        .option("connection_string", hub.connection_string)
        .option("eventhub_name", hub.name)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(300)
    except Exception as exc:  # StreamingQueryException: the source's error, as the user sees it
        read = any(p["numInputRows"] for p in query.recentProgress)
        if "Python worker failed to connect back" in str(exc) and not read:
            raise _WorkerStartTimeout(str(exc)) from exc
        raise AssertionError(str(exc)) from exc
    finally:
        query.stop()
    return [p for p in query.recentProgress if p["numInputRows"]]
