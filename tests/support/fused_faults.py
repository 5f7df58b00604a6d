"""A batch writer whose first attempt of one task writes part of its rows, then fails: what a
reader task that dies mid-write leaves (closed Parquet files no commit names). Pickled by value
into the Spark tasks (:func:`fail_once`), so the executors need not import the tests."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

__all__ = ["FailOnce", "fail_once"]


class FailOnce(DataSourceArrowWriter):
    """``inner``, except that attempt 0 of Spark partition 0 writes its first batch and fails."""

    def __init__(self, inner: DataSourceArrowWriter) -> None:
        self.inner = inner

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None
        if context.partitionId() == 0 and context.attemptNumber() == 0:
            self.inner.write(itertools.islice(iterator, 1))  # a file of the first batch
            raise RuntimeError("injected: a reader task failing after writing part of its rows")
        return self.inner.write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self.inner.commit(messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self.inner.abort(messages)


def fail_once() -> None:
    """Make every fused batch writer of this process a :class:`FailOnce`."""
    import sys

    from pyspark import cloudpickle

    import dagster_eventhub_ingest.ops.sinks.fused as fused

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    real = fused.fused_writer

    def failing(*args: Any) -> DataSourceArrowWriter | None:
        writer = real(*args)
        return None if writer is None else FailOnce(writer)

    fused.fused_writer = failing  # type: ignore[assignment]
