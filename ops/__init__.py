"""ops: the run's steps (plan, claim, read, write, checkpoint) over resources/.

The public names load lazily: Spark executors import ``ops.write`` (the Delta writer) from the
shipped code, and an eager import of ``ops.run`` here would pull the driver-only configuration
model (pydantic) into every executor's Python, which need not have it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ops.run import IngestConfig, PartitionReport, ReplaySpec, RunReport, run_ingestion
    from ops.stats import PartitionWriteStats
    from ops.status import PartitionStatus, partition_status
    from ops.write import WriteResult, read_sink, write_batch

_HOMES = {
    "IngestConfig": "ops.run",
    "PartitionReport": "ops.run",
    "ReplaySpec": "ops.run",
    "RunReport": "ops.run",
    "run_ingestion": "ops.run",
    "PartitionStatus": "ops.status",
    "partition_status": "ops.status",
    "PartitionWriteStats": "ops.stats",
    "WriteResult": "ops.write",
    "read_sink": "ops.write",
    "write_batch": "ops.write",
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
