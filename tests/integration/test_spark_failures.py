"""Failures of a real local SparkSession and its JVM, classified by Spark error condition, Java
class, errno and the class a Python worker raised; never by message text (tests/unit/
test_failures.py has the Python, Azure and Spark Connect cases)."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dagster_eventhub_ingest.ops.sinks.failures import failure_cause, sink_failure_retryable
from dagster_eventhub_ingest.resources import failures as f
from dagster_eventhub_ingest.resources.failures import FailureKind, classify
from tests.support.raising import raised

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def _jvm(spark: SparkSession) -> Any:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    return jvm


def _worker(spark: SparkSession, raise_it: Callable[[int], int]) -> BaseException:
    from pyspark.sql.functions import udf

    return raised(lambda: spark.range(1).select(udf(raise_it, "int")("id")).collect())


def _fail_with(exc: BaseException) -> Callable[[int], int]:
    def raise_it(_: int) -> int:
        raise exc

    return raise_it


SPARK_CASES: list[tuple[str, Callable[[SparkSession, Path], BaseException], FailureKind | None]] = [
    (
        "a file where a parent directory should be",
        lambda s, tmp: raised(lambda: s.range(1).write.parquet(str(tmp / "blocker" / "out"))),
        f.NOT_A_DIRECTORY,
    ),
    (
        "a missing table",
        lambda s, tmp: raised(lambda: s.range(1).write.insertInto("no_such_table_here")),
        f.NOT_FOUND,
    ),
    (
        "an unknown data source",
        lambda s, tmp: raised(
            lambda: s.range(1).write.format("com.example.NoSuchSource").save(str(tmp / "x"))
        ),
        f.NOT_FOUND,
    ),
    (
        "a path that does not exist",
        lambda s, tmp: raised(lambda: s.read.parquet(str(tmp / "nothing")).collect()),
        f.NOT_FOUND,
    ),
    (
        "an unresolved column",
        lambda s, tmp: raised(lambda: s.range(1).select("nope").collect()),
        f.MISMATCH,
    ),
    (
        "a text dataset written twice",
        lambda s, tmp: raised(
            lambda: [
                s.createDataFrame([("a",)], "value string").write.text(str(tmp / "t"))
                for _ in range(2)
            ]
        ),
        f.ALREADY_EXISTS,
    ),
    (
        "the JVM writes to a full disk",
        lambda s, tmp: raised(lambda: _jvm(s).java.io.FileOutputStream("/dev/full").write(1)),
        f.DISK_FULL,
    ),
    (
        "the JVM may not write",
        lambda s, tmp: raised(lambda: _jvm(s).java.io.FileOutputStream(str(tmp / "blocker" / "x"))),
        f.NOT_A_DIRECTORY,
    ),
    (
        "a worker's TypeError",
        lambda s, tmp: _worker(s, _fail_with(TypeError("retry me"))),
        f.INVALID,
    ),
    (
        "a worker's full disk",
        lambda s, tmp: _worker(s, _fail_with(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))),
        f.DISK_FULL,
    ),
    (
        "a worker's refused file",
        lambda s, tmp: _worker(s, _fail_with(PermissionError(errno.EACCES, "x"))),
        f.PERMISSION_DENIED,
    ),
    ("a worker's ZeroDivisionError", lambda s, tmp: _worker(s, lambda x: x // 0), None),
]


@pytest.mark.parametrize(
    ("make", "kind"), [c[1:] for c in SPARK_CASES], ids=[c[0] for c in SPARK_CASES]
)
def test_spark_failures(
    spark: SparkSession,
    tmp_path: Path,
    make: Callable[[SparkSession, Path], BaseException],
    kind: FailureKind,
) -> None:
    (tmp_path / "blocker").write_text("a file where a directory should be")
    exc = make(spark, tmp_path)
    failure = classify(exc)
    assert (failure.kind if failure else None) is kind, failure
    assert sink_failure_retryable(exc) is (kind.retryable if kind else True)


def test_the_buried_operating_system_cause_leads_the_message(spark: SparkSession) -> None:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    full = raised(lambda: jvm.java.io.FileOutputStream("/dev/full").write(1))
    assert failure_cause(full).startswith(
        "the disk is full: java.io.IOException: No space left on device"
    )
    refused = _worker(spark, _fail_with(PermissionError(errno.EACCES, "Permission denied")))
    assert failure_cause(refused).startswith("permission denied: PermissionError: [Errno 13]")
