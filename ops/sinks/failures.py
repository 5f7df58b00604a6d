"""Why a sink write failed, and whether retrying can help, for the sink's messages.

The cause is classified once, by type, status, errno and Spark error condition
(:func:`~dagster_eventhub_ingest.resources.failures.classify`); this module words it for a
:class:`~dagster_eventhub_ingest.resources.errors.SinkError`: :func:`failure_cause` brings the
cause forward (an operating system's cause buried in a JVM error first), and
:func:`sink_failure_retryable` decides the error's ``retryable`` flag, which sets the CLI's exit
code and Dagster's retries. No Spark import: the checks a run makes before any claim use it too.
"""

from __future__ import annotations

import re

from dagster_eventhub_ingest.resources.errors import SinkError, redact
from dagster_eventhub_ingest.resources.failures import (
    DISK_FULL,
    PERMISSION_DENIED,
    QUOTA_EXCEEDED,
    READ_ONLY,
    classify,
)

__all__ = ["sink_failure_retryable"]

#: Causes a JVM or Python error buries under its own words; the message leads with them.
_BURIED = (DISK_FULL, QUOTA_EXCEEDED, PERMISSION_DENIED, READ_ONLY)

_RAISED = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception): ")


def failure_cause(exc: BaseException) -> str:
    """What went wrong, for a message: the failure's own first words, led by the operating
    system's cause when one is buried in it."""
    text = str(getattr(exc, "desc", None) or exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # A Python worker's failure arrives as a whole traceback: its last "...Error: msg" line is
    # the cause. Otherwise the error's first lines say what went wrong.
    raised = [ln for ln in lines if _RAISED.match(ln)]
    head = raised[-1] if raised else " | ".join(lines[:3])
    failure = classify(exc)
    if failure is not None and failure.kind in _BURIED:
        rest = head.replace(failure.detail, "").strip(" |")
        head = f"{failure.kind.what}: {failure.detail}" + (f" ({rest[:300]})" if rest else "")
    return redact(head[:900])


def sink_failure_retryable(exc: BaseException) -> bool:
    """Whether retrying a write that failed with ``exc`` may succeed.

    As the failure's kind says (:mod:`~dagster_eventhub_ingest.resources.failures`): False for a
    cause retrying cannot fix (permission denied, a read-only disk, a bad path, a missing table
    or format, a schema or layout mismatch, a Python error in the data's handling); True for
    one that may pass (a reset connection, a storage 5xx or throttling, a concurrent commit, a
    full disk or quota: freeing space helps) and for any cause the table does not know (an I/O
    error without a type, a lost executor).
    """
    failure = classify(exc)
    return True if failure is None else failure.retryable


def sink_error(message: str, exc: BaseException) -> SinkError:
    """A :class:`SinkError` for a failure caused by ``exc``, retryable as its cause says."""
    return SinkError(message, retryable=sink_failure_retryable(exc))
