"""What a failure is, and whether retrying can help: one table keyed by type and status.

:func:`classify` reads what an exception says about itself, never its message text:

- an ``errno`` (``OSError``; the Java and Rust runtimes render one only as its
  ``strerror``/``(os error N)``, which is decoded back to the number);
- an HTTP status and an Azure error code (``azure.core``'s ``HttpResponseError``);
- an AMQP error condition (``azure-eventhub``'s ``EventHubError``);
- a Spark error condition (``getCondition()``, ``getErrorClass()`` before it, on PySpark's
  exceptions, on the JVM's ``SparkThrowable`` and on Spark Connect's exceptions);
- the Java exception classes of a JVM error's cause chain (``Py4JJavaError``; a Spark Connect
  error's server stack trace names them), and the Python classes of an exception (or, for a
  Python worker's failure, of the one its traceback raised).

Each exception of the chain (``__cause__``/``__context__``, then a JVM error's causes) is looked
at, outer to inner; the innermost one the tables know decides: the root cause is what the user
must fix. An exception none of the tables knows is :data:`UNKNOWN`: the caller decides (a sink
write retries it).
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dagster_eventhub_ingest.resources.errors import redact

__all__ = [
    "Failure",
    "FailureKind",
    "already_exists",
    "classify",
    "error_condition",
    "exception_chain",
]


@dataclass(frozen=True)
class FailureKind:
    """A cause a user can act on: what it is (``what``, said to the user) and whether retrying
    can help."""

    what: str
    retryable: bool


PERMISSION_DENIED = FailureKind("permission denied", retryable=False)
READ_ONLY = FailureKind("the file system is read-only", retryable=False)
DISK_FULL = FailureKind("the disk is full", retryable=True)  # freeing space helps
QUOTA_EXCEEDED = FailureKind("the disk quota is exceeded", retryable=True)
NOT_FOUND = FailureKind("it does not exist", retryable=False)
NOT_A_DIRECTORY = FailureKind("a parent of the path is not a directory", retryable=False)
ALREADY_EXISTS = FailureKind("it already exists", retryable=False)
MISMATCH = FailureKind("the data does not match the schema or layout", retryable=False)
INVALID = FailureKind("the request is invalid", retryable=False)
UNAUTHORIZED = FailureKind("the credential was refused", retryable=False)
THROTTLED = FailureKind("the service is busy", retryable=True)
UNAVAILABLE = FailureKind("the service or the network failed", retryable=True)
CONFLICT = FailureKind("a concurrent change conflicted", retryable=True)

#: Kinds by errno (``OSError.errno``).
BY_ERRNO: dict[int, FailureKind] = {
    errno.EACCES: PERMISSION_DENIED,
    errno.EPERM: PERMISSION_DENIED,
    errno.EROFS: READ_ONLY,
    errno.ENOSPC: DISK_FULL,
    errno.EDQUOT: QUOTA_EXCEEDED,
    errno.ENOENT: NOT_FOUND,
    errno.ENOTDIR: NOT_A_DIRECTORY,
    errno.EISDIR: INVALID,
    errno.EEXIST: ALREADY_EXISTS,
    errno.ECONNRESET: UNAVAILABLE,
    errno.ECONNREFUSED: UNAVAILABLE,
    errno.ETIMEDOUT: UNAVAILABLE,
    errno.EPIPE: UNAVAILABLE,
}

#: Kinds by Azure error code (``HttpResponseError.error_code``), checked before the status.
BY_AZURE_CODE: dict[str, FailureKind] = {
    "AuthorizationPermissionMismatch": PERMISSION_DENIED,
    "AuthorizationFailure": PERMISSION_DENIED,
    "InsufficientAccountPermissions": PERMISSION_DENIED,
    "AuthenticationFailed": UNAUTHORIZED,
    "ContainerNotFound": NOT_FOUND,
    "FilesystemNotFound": NOT_FOUND,
    "PathNotFound": NOT_FOUND,
    "BlobNotFound": NOT_FOUND,
    "ResourceNotFound": NOT_FOUND,
    "ContainerAlreadyExists": ALREADY_EXISTS,
    "ServerBusy": THROTTLED,
    "OperationTimedOut": UNAVAILABLE,
    "InternalError": UNAVAILABLE,
}

#: Kinds by HTTP status (``HttpResponseError.status_code``).
BY_STATUS: dict[int, FailureKind] = {
    401: UNAUTHORIZED,
    403: PERMISSION_DENIED,
    404: NOT_FOUND,
    408: UNAVAILABLE,
    429: THROTTLED,
    500: UNAVAILABLE,
    502: UNAVAILABLE,
    503: THROTTLED,
    504: UNAVAILABLE,
}

#: Kinds by AMQP error condition (the AMQP error an ``azure-eventhub`` error keeps).
BY_AMQP_CONDITION: dict[str, FailureKind] = {
    "amqp:not-found": NOT_FOUND,
    "amqp:unauthorized-access": UNAUTHORIZED,
    "amqp:resource-limit-exceeded": THROTTLED,
    "com.microsoft:server-busy": THROTTLED,
    "com.microsoft:timeout": UNAVAILABLE,
    "amqp:internal-error": UNAVAILABLE,
}

#: Kinds by Spark error condition (its main part: ``UNRESOLVED_COLUMN.WITH_SUGGESTION`` is
#: ``UNRESOLVED_COLUMN``).
BY_SPARK_CONDITION: dict[str, FailureKind] = {
    "TABLE_OR_VIEW_NOT_FOUND": NOT_FOUND,
    "DATA_SOURCE_NOT_FOUND": NOT_FOUND,
    "PATH_NOT_FOUND": NOT_FOUND,
    "SCHEMA_NOT_FOUND": NOT_FOUND,
    "TABLE_OR_VIEW_ALREADY_EXISTS": ALREADY_EXISTS,
    "SCHEMA_ALREADY_EXISTS": ALREADY_EXISTS,
    "PATH_ALREADY_EXISTS": ALREADY_EXISTS,
    # Spark Connect's artifact manager: an artifact of that name is in the session already
    # (SQLSTATE 42713); a classic session's ``addArtifacts`` says DUPLICATED_ARTIFACT.
    "ARTIFACT_ALREADY_EXISTS": ALREADY_EXISTS,
    "DUPLICATED_ARTIFACT": ALREADY_EXISTS,
    "UNRESOLVED_COLUMN": MISMATCH,
    "INCOMPATIBLE_DATA_FOR_TABLE": MISMATCH,
    "INSERT_COLUMN_ARITY_MISMATCH": MISMATCH,
    "CANNOT_UP_CAST_DATATYPE": MISMATCH,
    "DATATYPE_MISMATCH": MISMATCH,
    "INCOMPATIBLE_COLUMN_TYPE": MISMATCH,
    "UNSUPPORTED_DATA_SOURCE_SAVE_MODE": INVALID,
}

#: Kinds by Java exception class (the class or one of its superclasses).
BY_JAVA_CLASS: dict[str, FailureKind] = {
    "java.nio.file.AccessDeniedException": PERMISSION_DENIED,
    "org.apache.hadoop.security.AccessControlException": PERMISSION_DENIED,
    "java.nio.file.ReadOnlyFileSystemException": READ_ONLY,
    "java.io.FileNotFoundException": NOT_FOUND,
    "java.nio.file.NoSuchFileException": NOT_FOUND,
    "java.nio.file.NotDirectoryException": NOT_A_DIRECTORY,
    "org.apache.hadoop.fs.ParentNotDirectoryException": NOT_A_DIRECTORY,
    "org.apache.hadoop.fs.UnsupportedFileSystemException": INVALID,
    "org.apache.hadoop.fs.FileAlreadyExistsException": ALREADY_EXISTS,
    "java.nio.file.FileAlreadyExistsException": ALREADY_EXISTS,
    "org.apache.spark.sql.catalyst.analysis.TableAlreadyExistsException": ALREADY_EXISTS,
    "org.apache.spark.sql.AnalysisException": INVALID,
    "org.apache.spark.sql.catalyst.parser.ParseException": INVALID,
    "java.lang.IllegalArgumentException": INVALID,
}

#: Kinds by Python exception class name (the class or one of its bases), so that classes of
#: optional libraries (PySpark, deltalake) need no import.
BY_PYTHON_CLASS: dict[str, FailureKind] = {
    "ClientAuthenticationError": UNAUTHORIZED,
    "AuthenticationError": UNAUTHORIZED,  # azure-eventhub's, when no deeper cause explains it
    "ResourceNotFoundError": NOT_FOUND,
    "ResourceExistsError": ALREADY_EXISTS,
    "ServiceRequestError": UNAVAILABLE,
    "ServiceResponseError": UNAVAILABLE,
    "PermissionError": PERMISSION_DENIED,
    "FileNotFoundError": NOT_FOUND,
    "NotADirectoryError": NOT_A_DIRECTORY,
    "IsADirectoryError": INVALID,
    "TableNotFoundError": NOT_FOUND,
    "SchemaMismatchError": MISMATCH,
    "CommitFailedError": CONFLICT,
    "DeltaProtocolError": INVALID,
    "AnalysisException": INVALID,
    "ParseException": INVALID,
    "IllegalArgumentException": INVALID,
    "TypeError": INVALID,
    "ValueError": INVALID,
    "KeyError": INVALID,
    "AttributeError": INVALID,
    "NotImplementedError": INVALID,
    "TimeoutError": UNAVAILABLE,
    "ConnectionError": UNAVAILABLE,
}

#: Java renders an errno only as its ``strerror`` (``java.io.IOException: No space left on
#: device``; ``FileNotFoundException: /p (Permission denied)``): the errno back from it.
_STRERROR = {os.strerror(code): code for code in BY_ERRNO}
_STRERROR_RE = re.compile(
    r"(?:^|: |\()(" + "|".join(re.escape(s) for s in sorted(_STRERROR, key=len)) + r")\)?$"
)
#: Rust (delta-rs, object_store) renders one as ``(os error 28)``.
_RUST_ERRNO_RE = re.compile(r"\(os error (\d+)\)")
#: A Python traceback's raised line (a Python worker's failure) and a server stack trace's
#: cause line (Spark Connect) name a class first.
_RAISED_RE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))(?:: |$)")
#: A Python ``OSError`` renders its errno as ``[Errno 28]`` in a worker's traceback.
_PY_ERRNO_RE = re.compile(r": \[Errno (\d+)\]")
_CAUSED_BY_RE = re.compile(r"^Caused by: ([A-Za-z_][\w.$]*)(?::|$)")


@dataclass(frozen=True)
class Failure:
    """What :func:`classify` found: the :class:`FailureKind`, what decided it (``by``: an
    errno name, ``HTTP 403``, a condition, a class) and the failing part's own line
    (``detail``, redacted)."""

    kind: FailureKind
    by: str
    detail: str

    @property
    def retryable(self) -> bool:
        return self.kind.retryable


UNKNOWN = None


def exception_chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its ``__cause__``/``__context__`` chain, outer first, without cycles; an
    ``azure-eventhub`` error with neither leads to the AMQP error it keeps as ``details``."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not c for c in chain):
        chain.append(current)
        following = current.__cause__ or current.__context__
        if following is None:
            details = getattr(current, "details", None)
            following = details if isinstance(details, BaseException) else None
        current = following
    return chain


def classify(exc: BaseException) -> Failure | None:
    """The innermost cause of ``exc`` the tables know, or ``None`` when none is known."""
    found: Failure | None = None
    for member in exception_chain(exc):
        for failure in _facts(member):
            found = failure
            break  # a member's most specific fact; a deeper member may still override it
    return found


def already_exists(exc: BaseException) -> bool:
    """Whether ``exc`` says that what it was to create exists (a table, a path, a container)."""
    failure = classify(exc)
    return failure is not None and failure.kind is ALREADY_EXISTS


def error_condition(exc: BaseException) -> str | None:
    """The first Spark error condition (``TABLE_OR_VIEW_NOT_FOUND``...) in ``exc``'s chain, on
    the Python side or the JVM's, or ``None``."""
    for member in exception_chain(exc):
        condition = _spark_condition(member)
        if condition is not None:
            return condition
        java = getattr(member, "java_exception", None)
        while java is not None:
            try:
                condition = _spark_condition(java)
                java = java.getCause()
            except Exception:
                break
            if condition is not None:
                return condition
    return None


def _facts(exc: BaseException) -> Iterator[Failure]:
    """What one exception says about itself, most specific first, then what the JVM
    exceptions behind it say (innermost last: the caller keeps the last member's first)."""
    jvm = list(_jvm_facts(exc))
    if jvm:
        yield jvm[-1]
        return
    yield from _python_facts(exc)


def _python_facts(exc: BaseException) -> Iterator[Failure]:
    detail = _line(f"{type(exc).__name__}: {exc}")
    code = exc.errno if isinstance(exc, OSError) else None
    if code is None and isinstance(exc, OSError):
        code = _rust_errno(str(exc))
    if isinstance(code, int) and code in BY_ERRNO:
        yield Failure(BY_ERRNO[code], errno.errorcode.get(code, str(code)), detail)
    azure_code = getattr(exc, "error_code", None)
    azure_code = getattr(azure_code, "value", azure_code)
    if isinstance(azure_code, str) and azure_code in BY_AZURE_CODE:
        yield Failure(BY_AZURE_CODE[azure_code], azure_code, detail)
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and status in BY_STATUS:
        yield Failure(BY_STATUS[status], f"HTTP {status}", detail)
    condition = _amqp_condition(exc)
    if condition in BY_AMQP_CONDITION:
        yield Failure(BY_AMQP_CONDITION[condition], condition, detail)
    spark = _spark_condition(exc)
    if spark is not None and spark.split(".", 1)[0] in BY_SPARK_CONDITION:
        yield Failure(BY_SPARK_CONDITION[spark.split(".", 1)[0]], spark, detail)
    # A Python worker's failure: the class its traceback raised, then the Java classes a
    # Spark Connect server stack trace names (innermost last).
    raised = _raised_classes(exc)
    if raised:
        line = _raised_line(exc, raised[-1])
        code_in_line = _PY_ERRNO_RE.search(line)
        worker_errno = int(code_in_line.group(1)) if code_in_line else None
        if worker_errno in BY_ERRNO:
            assert worker_errno is not None
            yield Failure(BY_ERRNO[worker_errno], errno.errorcode[worker_errno], _line(line))
        kind = BY_PYTHON_CLASS.get(raised[-1].rsplit(".", 1)[-1])
        if kind is not None:
            yield Failure(kind, raised[-1], _line(line))
    for name, line in reversed(_server_causes(exc)):
        java_kind = _java_kind([name], line)
        if java_kind is not None:
            yield Failure(java_kind[0], java_kind[1], _line(line))
            break
    for klass in type(exc).__mro__:
        if klass.__name__ in BY_PYTHON_CLASS:
            yield Failure(BY_PYTHON_CLASS[klass.__name__], klass.__name__, detail)
            break


def _line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return redact(lines[0][:300]) if lines else ""


def _rust_errno(text: str) -> int | None:
    found = _RUST_ERRNO_RE.search(text)
    return int(found.group(1)) if found else None


def _amqp_condition(exc: BaseException) -> str | None:
    condition = getattr(exc, "condition", None)
    condition = getattr(condition, "value", condition)
    if isinstance(condition, bytes):
        condition = condition.decode("utf-8", "replace")
    return condition if isinstance(condition, str) else None


def _spark_condition(exc: Any) -> str | None:
    """A PySpark or Spark Connect exception's error condition (``getCondition``, PySpark 4.0+;
    ``getErrorClass`` before it)."""
    for name in ("getCondition", "getErrorClass"):
        get = getattr(exc, name, None)
        if callable(get):
            try:
                value = get()
            except Exception:
                continue
            if isinstance(value, str) and value:
                return value
    return None


def _raised_classes(exc: BaseException) -> list[str]:
    """The classes a Python traceback in a worker failure raised (``PythonException``)."""
    if not any(k.__name__ == "PythonException" for k in type(exc).__mro__):
        return []
    out = []
    for ln in str(exc).splitlines():
        found = _RAISED_RE.match(ln.strip())
        if found:
            out.append(found.group(1))
    return out


def _raised_line(exc: BaseException, name: str) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip().startswith(name)]
    return lines[-1] if lines else name


def _server_causes(exc: BaseException) -> list[tuple[str, str]]:
    """A Spark Connect error's JVM cause chain, from its server stack trace: ``(class, line)``
    per ``Caused by:`` line, outer first."""
    get = getattr(exc, "getStackTrace", None)
    if not callable(get) or not any(
        k.__name__ == "SparkConnectGrpcException" for k in type(exc).__mro__
    ):
        return []
    try:
        trace = get() or ""
    except Exception:
        return []
    out = []
    for ln in trace.splitlines():
        found = _CAUSED_BY_RE.match(ln.strip())
        if found:
            out.append((found.group(1), ln.strip().removeprefix("Caused by: ")))
    return out


def _java_kind(classes: list[str], line: str) -> tuple[FailureKind, str] | None:
    """The kind of one JVM exception: by the errno its message renders, then by its classes."""
    message = line.split(": ", 1)[1] if ": " in line else ""
    if any(c.startswith(("java.io.", "java.nio.", "org.apache.hadoop.")) for c in classes):
        found = _STRERROR_RE.search(message.strip())
        if found:
            code = _STRERROR[found.group(1)]
            return BY_ERRNO[code], errno.errorcode.get(code, str(code))
    for name in classes:
        if name in BY_JAVA_CLASS:
            return BY_JAVA_CLASS[name], name
    return None


def _jvm_facts(exc: BaseException) -> Iterator[Failure]:
    """What a ``Py4JJavaError``'s JVM exception and its causes say, outer first."""
    java = getattr(exc, "java_exception", None)
    if java is None:
        return
    seen = 0
    while java is not None and seen < 20:
        seen += 1
        try:
            classes = _java_classes(java)
            message = str(java.getMessage() or "")
            condition = _spark_condition(java)
            line = f"{classes[0]}: {message}" if classes else message
        except Exception:  # the JVM went away: nothing more to learn from it
            return
        main = condition.split(".", 1)[0] if condition else None
        if main in BY_SPARK_CONDITION:
            assert condition is not None
            yield Failure(BY_SPARK_CONDITION[main], condition, _line(line))
        else:
            kind = _java_kind(classes, line)
            if kind is not None:
                yield Failure(kind[0], kind[1], _line(line))
        try:
            java = java.getCause()
        except Exception:
            return


def _java_classes(java: Any) -> list[str]:
    """A JVM exception's class and superclasses, by name."""
    names: list[str] = []
    klass = java.getClass()
    while klass is not None and len(names) < 12:
        name = str(klass.getName())
        if name in ("java.lang.Throwable", "java.lang.Object"):
            break
        names.append(name)
        klass = klass.getSuperclass()
    return names
