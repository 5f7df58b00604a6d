"""What the Python batch writers share: the plain values pickled to their tasks, the file
system they write through, a repr without the storage options.

:class:`~dagster_eventhub_ingest.ops.sinks.delta_writer.DeltaBatchWriter` and
:class:`~dagster_eventhub_ingest.ops.sinks.parquet_writer.ParquetBatchWriter` are
``DataSourceArrowWriter``: each task writes Parquet files from Arrow batches with pyarrow
(:mod:`dagster_eventhub_ingest.ops.sinks.parquet_files`), the driver commits them.
"""

from __future__ import annotations

import uuid
from typing import Any

from pyspark.sql.datasource import DataSourceArrowWriter

from dagster_eventhub_ingest.ops.sinks.storage import delta_uri

__all__ = ["ArrowBatchWriter"]


class ArrowBatchWriter(DataSourceArrowWriter):
    """One batch's writer: its ``location`` (a local path made absolute, or a URI), the
    partition columns (``partition_by`` + ``eh_batch``), the rows' schema as Spark's JSON, the
    batch keys and the storage options. Holds plain values only (pickled to tasks); each
    instance is one attempt (``attempt``, in its files' names)."""

    def __init__(
        self,
        location: str,
        partition_cols: list[str],
        schema_json: str,
        keys: list[str],
        storage_options: dict[str, str] | None = None,
    ) -> None:
        self.location = delta_uri(location)
        self.partition_cols = partition_cols
        self.schema_json = schema_json
        self.keys = keys
        self.storage_options = dict(storage_options or {})
        self.attempt = uuid.uuid4().hex[:12]

    def __repr__(self) -> str:
        # storage_options may hold an account key or SAS: never in a repr (logs, tracebacks).
        return f"{type(self).__name__}({self.location!r}, keys={self.keys})"

    def _filesystem(self) -> tuple[Any, str]:
        """pyarrow's file system of the location, and the location's root in it (no trailing
        slash)."""
        from dagster_eventhub_ingest.ops.sinks.storage import arrow_filesystem

        filesystem, root = arrow_filesystem(self.location, self.storage_options)
        return filesystem, root.rstrip("/")
