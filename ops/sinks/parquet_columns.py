"""Which columns the sinks' Parquet files write without a dictionary or without statistics.

One list for both Parquet writers: parquet-mr in the Spark formats' tasks
(:mod:`dagster_eventhub_ingest.ops.sinks.spark_writer`) and pyarrow in the ``deltalake`` sink's
tasks (:mod:`dagster_eventhub_ingest.ops.sinks.delta_writer`). docs/sinks.md ("Parquet
encodings") has the measurements.
"""

from __future__ import annotations

__all__ = ["NO_STATISTICS_COLUMNS", "PLAIN_COLUMNS"]

#: Columns written without dictionary encoding: each event has its own value, so a writer only
#: hashes every value into a dictionary until it gives up on the page. ``body`` is left to the
#: writer: repeated bodies do compress into a dictionary, and a unique body gives up within
#: ~1,000 rows of each column chunk. The files are the same size.
PLAIN_COLUMNS = ("sequenceNumber", "offset", "enqueuedTime")

#: Columns written without min/max statistics: an event's body is an opaque payload no query
#: prunes row groups or pages by, and both writers keep the whole smallest and largest value of
#: each column chunk in the file's footer (untruncated by default): two bodies per row group, up
#: to the hub's 1 MB event each, and a comparison with both for every body written.
NO_STATISTICS_COLUMNS = ("body",)
