"""ops."""

from ops.write import PartitionWriteStats, WriteResult, read_sink, write_batch

__all__ = ["PartitionWriteStats", "WriteResult", "read_sink", "write_batch"]
