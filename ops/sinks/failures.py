"""Why a sink write failed, and whether retrying can help: one home for sink failure causes.

:func:`failure_cause` brings the cause forward (the last ``...Error:`` line of a worker traceback,
or the operating system's cause buried in a JVM error); :func:`sink_failure_retryable` decides the
``retryable`` flag of the :class:`~dagster_eventhub_ingest.resources.errors.SinkError`
:func:`sink_error` builds, which sets the CLI's exit code and Dagster's retries. Pure text and
exception types, no Spark: the checks a run makes before any claim use it too.
"""

from __future__ import annotations

import errno
import re

from dagster_eventhub_ingest.resources.errors import SinkError, redact

__all__ = ["sink_failure_retryable"]


def failure_cause(exc: BaseException) -> str:
    text = str(getattr(exc, "desc", None) or exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # A Python worker's failure arrives as a whole traceback: its last "...Error: msg" line is
    # the cause. Otherwise the JVM error's first lines say what went wrong.
    raised = [ln for ln in lines if _RAISED.match(ln)]
    head = raised[-1] if raised else " | ".join(lines[:3])
    # A JVM write error (TASK_WRITE_FAILED, a failed job commit) names the operating system's
    # cause only deep in its stack: bring it forward, it is what the user must fix.
    for ln in lines:
        low = ln.lower()
        root = next((c for c in _OS_CAUSES if c in low), None)
        if root is not None:
            rest = head.replace(ln, "").strip(" |")
            head = f"{_OS_CAUSES[root]}: {ln[:300]}" + (f" ({rest[:300]})" if rest else "")
            break
    return redact(head[:900])


#: Operating-system causes hidden in JVM write errors, and what they mean to the user.
_OS_CAUSES = {
    "no space left on device": "the disk is full",
    "disk quota exceeded": "the disk quota is exceeded",
    "permission denied": "permission denied",
    "accessdeniedexception": "permission denied",
    "read-only file system": "the file system is read-only",
}


_RAISED = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception): ")

#: Causes retrying cannot fix, as they appear in JVM, Python, Hadoop, ABFS and delta-rs errors
#: (lower-cased): rights, a read-only disk, a bad path or table, a schema or layout that does not
#: match. Anything else (an I/O timeout, a reset connection, a storage 5xx, a lost executor, a
#: concurrent Delta commit, a full disk or quota: space can be freed) may pass: the write is
#: retryable.
_PERMANENT_CAUSES = (
    # rights
    "permission denied",
    "accessdenied",
    "access denied",
    "not authorized",
    "authorizationpermissionmismatch",
    "authorizationfailure",
    "authenticationfailed",
    # read-only
    "read-only file system",
    # bad path, missing table or format
    "no such file or directory",
    "filenotfoundexception",
    "does not exist",
    "not a directory",
    "notdirectoryexception",
    "filealreadyexistsexception",
    "mkdirs failed",
    "no filesystem for scheme",
    "unsupportedfilesystemexception",
    "wrong fs",
    "containernotfound",
    "filesystemnotfound",
    "pathnotfound",
    "table_or_view_not_found",
    "data_source_not_found",
    # schema or layout
    "schema mismatch",
    "schemamismatch",
    "does not match",
    "incompatible",
    "cannot be cast",
    "cannot_up_cast",
    "datatype_mismatch",
    "unresolved_column",
)

#: Exception classes (by name, anywhere in the chain's MROs) that are deterministic: analysis of
#: the plan, bad arguments, a Python bug, an operating system refusal.
_PERMANENT_TYPES = frozenset(
    {
        "AnalysisException",
        "ParseException",
        "IllegalArgumentException",
        "SchemaMismatchError",
        "TableNotFoundError",
        "DeltaProtocolError",
        "PermissionError",
        "FileNotFoundError",
        "NotADirectoryError",
        "IsADirectoryError",
        "TypeError",
        "ValueError",
        "KeyError",
        "AttributeError",
        "NotImplementedError",
    }
)

#: The same errors when a Python worker's traceback names them (``TypeError: ...``).
_PERMANENT_RAISED = re.compile(
    r"^(?:[\w.]+\.)?(" + "|".join(sorted(_PERMANENT_TYPES)) + r"): ", re.MULTILINE
)


#: Operating-system errors that freeing space fixes: the write is retried, whatever else the
#: chain says.
_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def sink_failure_retryable(exc: BaseException) -> bool:
    """Whether retrying a write that failed with ``exc`` may succeed.

    False when its cause is one retrying cannot fix (:data:`_PERMANENT_CAUSES`,
    :data:`_PERMANENT_TYPES`): permission denied, a read-only disk, a bad path, a missing table
    or format, a schema or layout mismatch. True otherwise: an I/O timeout, a reset connection,
    a storage 5xx, a lost executor, a concurrent commit, a full disk or quota (an ``OSError``
    whose errno is ``ENOSPC``/``EDQUOT``: freeing space helps). Every exception of the chain
    (``__cause__``/``__context__``) is looked at, so a JVM error's buried cause counts.
    """
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not c for c in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    if any(isinstance(c, OSError) and c.errno in _SPACE_ERRNOS for c in chain):
        return True  # the typed cause, whatever the messages wrapped around it say
    for current in chain:
        if any(k.__name__ in _PERMANENT_TYPES for k in type(current).__mro__):
            return False
        text = str(getattr(current, "desc", None) or current)
        low = text.lower()
        if any(marker in low for marker in _PERMANENT_CAUSES):
            return False
        if _PERMANENT_RAISED.search(text):
            return False
    return True


def sink_error(message: str, exc: BaseException) -> SinkError:
    """A :class:`SinkError` for a failure caused by ``exc``, retryable as its cause says."""
    return SinkError(message, retryable=sink_failure_retryable(exc))
