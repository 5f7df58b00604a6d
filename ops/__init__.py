"""ops."""

from ops.run import IngestConfig, PartitionReport, ReplaySpec, RunReport, run_ingestion
from ops.status import PartitionStatus, partition_status
from ops.write import PartitionWriteStats, WriteResult, read_sink, write_batch

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
