"""Failure classification by type, status, errno and Spark error condition, table-driven.

Every case is a real exception: ``OSError``s with a real errno, Azure ``HttpResponseError``s
built by the storage SDK's own error handling from a real transport response, and Spark
Connect's exception classes as its client builds them from a server's error details (the
failures of a real local SparkSession and its JVM: tests/integration/test_spark_failures.py).
None is classified by its message: the cases whose message says the opposite of their type
prove it.
"""

from __future__ import annotations

import errno
from collections.abc import Callable

import pytest

from dagster_eventhub_ingest.ops.sinks.failures import sink_failure_retryable
from dagster_eventhub_ingest.resources import failures as f
from dagster_eventhub_ingest.resources.failures import FailureKind, classify
from tests.support.raising import raised, raised_from


def _storage_error(status: int, code: str | None) -> BaseException:
    """The ``HttpResponseError`` azure-storage-blob raises for a real response."""
    import requests
    from azure.core.exceptions import HttpResponseError
    from azure.core.pipeline.transport import HttpRequest, RequestsTransportResponse
    from azure.storage.blob._shared.response_handlers import process_storage_error

    raw = requests.Response()
    raw.status_code = status
    raw.reason = "reason"
    raw.headers["Content-Type"] = "application/xml"
    raw._content = b""
    if code is not None:
        raw.headers["x-ms-error-code"] = code
        raw._content = (
            f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code>'
            "<Message>it worked fine, please retry</Message></Error>"
        ).encode()
    response = RequestsTransportResponse(HttpRequest("PUT", "https://a.blob/c/b"), raw)
    return raised(lambda: process_storage_error(HttpResponseError(response=response)))


PYTHON_CASES: list[tuple[str, Callable[[], BaseException], FailureKind | None]] = [
    ("EACCES", lambda: OSError(errno.EACCES, "fine, retry"), f.PERMISSION_DENIED),
    ("EPERM", lambda: PermissionError(errno.EPERM, "x"), f.PERMISSION_DENIED),
    ("EROFS", lambda: OSError(errno.EROFS, "x"), f.READ_ONLY),
    ("ENOSPC", lambda: OSError(errno.ENOSPC, "permission denied"), f.DISK_FULL),
    ("EDQUOT", lambda: OSError(errno.EDQUOT, "x"), f.QUOTA_EXCEEDED),
    ("ENOENT", lambda: FileNotFoundError(errno.ENOENT, "x"), f.NOT_FOUND),
    ("ENOTDIR", lambda: NotADirectoryError(errno.ENOTDIR, "x"), f.NOT_A_DIRECTORY),
    ("ECONNRESET", lambda: ConnectionResetError(errno.ECONNRESET, "denied"), f.UNAVAILABLE),
    ("errno-less OSError", lambda: OSError("no space left on device"), None),
    ("Rust's (os error 28)", lambda: OSError("Generic error: (os error 28)"), f.DISK_FULL),
    ("Rust's (os error 13)", lambda: OSError("Generic error: (os error 13)"), f.PERMISSION_DENIED),
    ("ValueError", lambda: ValueError("timeout, retry"), f.INVALID),
    ("RuntimeError", lambda: RuntimeError("permission denied"), None),
    (
        "403 AuthorizationPermissionMismatch",
        lambda: _storage_error(403, "AuthorizationPermissionMismatch"),
        f.PERMISSION_DENIED,
    ),
    (
        "403 AuthenticationFailed",
        lambda: _storage_error(403, "AuthenticationFailed"),
        f.UNAUTHORIZED,
    ),
    ("404 ContainerNotFound", lambda: _storage_error(404, "ContainerNotFound"), f.NOT_FOUND),
    (
        "409 ContainerAlreadyExists",
        lambda: _storage_error(409, "ContainerAlreadyExists"),
        f.ALREADY_EXISTS,
    ),
    ("503 ServerBusy", lambda: _storage_error(503, "ServerBusy"), f.THROTTLED),
    ("500 without a code", lambda: _storage_error(500, None), f.UNAVAILABLE),
    ("412 ConditionNotMet", lambda: _storage_error(412, "ConditionNotMet"), None),
    # The innermost known cause decides: a full disk under a wrapper that is a ValueError.
    (
        "ENOSPC under ValueError",
        lambda: raised_from(ValueError("x"), OSError(errno.ENOSPC, "x")),
        f.DISK_FULL,
    ),
    (
        "EACCES under RuntimeError",
        lambda: raised_from(RuntimeError("x"), PermissionError(errno.EACCES, "x")),
        f.PERMISSION_DENIED,
    ),
]


@pytest.mark.parametrize(
    ("make", "kind"), [c[1:] for c in PYTHON_CASES], ids=[c[0] for c in PYTHON_CASES]
)
def test_python_and_azure_failures(make: Callable[[], BaseException], kind: FailureKind) -> None:
    exc = make()
    failure = classify(exc)
    assert (failure.kind if failure else None) is kind
    # An unknown cause is retried by the sink: it may be an I/O error without a type.
    assert sink_failure_retryable(exc) is (kind.retryable if kind else True)


def _connect(kind: str, condition: str | None, trace: str | None = None) -> BaseException:
    """A Spark Connect client exception as the client builds it from a server's error details
    (errorClass, messageParameters, server stack trace)."""
    pytest.importorskip("grpc")
    from pyspark.errors.exceptions import connect

    klass = getattr(connect, kind)
    return klass(
        "[X] it may pass on retry",
        errorClass=condition,
        messageParameters={},
        server_stacktrace=trace,
    )


CONNECT_CASES: list[tuple[str, Callable[[], BaseException], FailureKind | None]] = [
    (
        "TABLE_OR_VIEW_NOT_FOUND",
        lambda: _connect("AnalysisException", "TABLE_OR_VIEW_NOT_FOUND"),
        f.NOT_FOUND,
    ),
    (
        "UNRESOLVED_COLUMN",
        lambda: _connect("AnalysisException", "UNRESOLVED_COLUMN.WITH_SUGGESTION"),
        f.MISMATCH,
    ),
    (
        "ARTIFACT_ALREADY_EXISTS (an artifact of that name is in the session)",
        lambda: _connect("SparkRuntimeException", "ARTIFACT_ALREADY_EXISTS"),
        f.ALREADY_EXISTS,
    ),
    (
        "an unknown runtime error",
        lambda: _connect("SparkRuntimeException", "SOMETHING_NEW"),
        None,
    ),
    (
        "an unknown analysis error",
        lambda: _connect("AnalysisException", "SOMETHING_NEW"),
        f.INVALID,
    ),
    (
        "TASK_WRITE_FAILED, ENOSPC under it",
        lambda: _connect(
            "SparkException",
            "TASK_WRITE_FAILED",
            "org.apache.spark.SparkException\n\tat x.y(Z.java:1)\n"
            "Caused by: java.io.IOException: No space left on device\n\tat a.b(C.java:2)",
        ),
        f.DISK_FULL,
    ),
    (
        "TASK_WRITE_FAILED, AccessDenied under it",
        lambda: _connect(
            "SparkException",
            "TASK_WRITE_FAILED",
            "org.apache.spark.SparkException\n"
            "Caused by: java.nio.file.AccessDeniedException: /out: it may pass\n\tat a.b(C.java:2)",
        ),
        f.PERMISSION_DENIED,
    ),
    (
        "TASK_WRITE_FAILED, untyped IOException",
        lambda: _connect(
            "SparkException",
            "TASK_WRITE_FAILED",
            "org.apache.spark.SparkException\nCaused by: java.io.IOException: Mkdirs failed",
        ),
        None,
    ),
]


@pytest.mark.parametrize(
    ("make", "kind"), [c[1:] for c in CONNECT_CASES], ids=[c[0] for c in CONNECT_CASES]
)
def test_spark_connect_failures(make: Callable[[], BaseException], kind: FailureKind) -> None:
    failure = classify(make())
    assert (failure.kind if failure else None) is kind
