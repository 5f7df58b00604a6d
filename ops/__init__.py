"""ops: the run's steps (plan, claim, read, write, checkpoint) over resources/.

The public names load lazily: Spark executors import ``dagster_eventhub_ingest.ops.write`` (the
Delta writer) from the shipped code, and an eager import of ``dagster_eventhub_ingest.ops.run`` here
would pull the driver-only configuration model (pydantic) into every executor's Python, which need
not have it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dagster_eventhub_ingest.ops.run import (
        IngestConfig,
        PartitionReport,
        ReplaySpec,
        RunReport,
        run_ingestion,
    )
    from dagster_eventhub_ingest.ops.stats import PartitionWriteStats
    from dagster_eventhub_ingest.ops.status import PartitionStatus, partition_status
    from dagster_eventhub_ingest.ops.write import WriteResult, read_sink, write_batch

_HOMES = {
    "IngestConfig": "dagster_eventhub_ingest.ops.run",
    "PartitionReport": "dagster_eventhub_ingest.ops.run",
    "ReplaySpec": "dagster_eventhub_ingest.ops.run",
    "RunReport": "dagster_eventhub_ingest.ops.run",
    "run_ingestion": "dagster_eventhub_ingest.ops.run",
    "PartitionStatus": "dagster_eventhub_ingest.ops.status",
    "partition_status": "dagster_eventhub_ingest.ops.status",
    "PartitionWriteStats": "dagster_eventhub_ingest.ops.stats",
    "WriteResult": "dagster_eventhub_ingest.ops.write",
    "read_sink": "dagster_eventhub_ingest.ops.write",
    "write_batch": "dagster_eventhub_ingest.ops.write",
}

__all__ = [
    "IngestConfig",
    "PartitionReport",
    "PartitionStatus",
    "PartitionWriteStats",
    "ReplaySpec",
    "RunReport",
    "WriteResult",
    "partition_status",
    "read_sink",
    "run_ingestion",
    "write_batch",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'ops' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
