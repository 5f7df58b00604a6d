"""ops: the run's steps over resources/, one folder per step.

- :mod:`.run`: one ingestion run, from :func:`run_ingestion` to a moved checkpoint;
- :mod:`.balancing`: which partitions a run claims (strategies, liveness, the simulator);
- :mod:`.sinks`: writing a batch exactly once, and reading back what the sink holds;
- :mod:`.status` and :mod:`.lag`: a partition's state and lag without running anything;
  :mod:`.text`: the plain-text tables ``ehingest`` prints.

The public names load lazily: Spark executors import the sink's writers from the shipped code,
and an eager import of the run here would pull the driver-only configuration model (pydantic)
into every executor's Python, which need not have it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_eventhub_ingest.resources.lazy import lazy_face

if TYPE_CHECKING:
    from dagster_eventhub_ingest.ops.run.entry import run_ingestion
    from dagster_eventhub_ingest.ops.run.report import PartitionReport, RunReport
    from dagster_eventhub_ingest.ops.run.settings import IngestSettings, ReplaySettings
    from dagster_eventhub_ingest.ops.sinks.batch import PartitionWriteStats
    from dagster_eventhub_ingest.ops.sinks.read import read_sink
    from dagster_eventhub_ingest.ops.sinks.write import WriteResult, write_batch
    from dagster_eventhub_ingest.ops.status import PartitionStatus, partition_status

_HOMES = {
    "IngestSettings": ".run",
    "PartitionReport": ".run",
    "ReplaySettings": ".run",
    "RunReport": ".run",
    "run_ingestion": ".run",
    "PartitionStatus": ".status",
    "partition_status": ".status",
    "PartitionWriteStats": ".sinks",
    "WriteResult": ".sinks",
    "read_sink": ".sinks",
    "write_batch": ".sinks",
}

__all__ = [
    "IngestSettings",
    "PartitionReport",
    "PartitionStatus",
    "PartitionWriteStats",
    "ReplaySettings",
    "RunReport",
    "WriteResult",
    "partition_status",
    "read_sink",
    "run_ingestion",
    "write_batch",
]


__getattr__, __dir__ = lazy_face(__name__, _HOMES)
