"""The exit codes of ``ehingest run`` and ``ehingest status``: one table, one meaning each.

A code means the same thing whichever command exits with it (docs/run.md, "Exit codes", shows
this table; a test keeps the two in step). Errors map by their ``retryable`` flag, the flag
Dagster's retry policy and the Airflow operator read too.
"""

from __future__ import annotations

import signal

from dagster_eventhub_ingest.resources.errors import EventHubIngestError, RunCancelledError

__all__ = [
    "EXIT_CODES",
    "EXIT_CONFIG",
    "EXIT_FAILED",
    "EXIT_INCOMPLETE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "exit_code_for",
]

EXIT_OK = 0
EXIT_INCOMPLETE = 1
EXIT_CONFIG = 2
EXIT_FAILED = 3
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_TERMINATED = 128 + signal.SIGTERM

#: Code -> what it means (docs/run.md's table).
EXIT_CODES: dict[int, str] = {
    EXIT_OK: "`run`: every target partition reached its bound. `status`: the state was printed.",
    EXIT_INCOMPLETE: "`run` ended with partitions behind (`run_timeout_seconds`, a lost lease): "
    "run again.",
    EXIT_CONFIG: "Retrying cannot help: configuration or arguments, data loss, a checkpoint "
    "ahead of the hub, a corrupt store blob, a sink that refuses for good (permission denied, "
    "a bad path, a layout mismatch). Fix it first.",
    EXIT_FAILED: "Retrying later may help: a service unreachable or throttling past the "
    "retries, a sink write that failed for a transient cause (a timeout, a storage 5xx, a lost "
    "executor, a full disk once space is freed).",
    EXIT_INTERRUPTED: "Stopped by SIGINT (Ctrl-C): reading stopped, leases released with their "
    "intents kept, Spark stopped; the next run takes over at once.",
    EXIT_TERMINATED: "Stopped by SIGTERM (a pod deleted, a task killed): as for SIGINT.",
}


def exit_code_for(exc: BaseException) -> int:
    """The exit code for an error: by signal when the run was stopped, else 3 if retrying may
    help (``retryable``), else 2. Anything unexpected may be transient: 3."""
    if isinstance(exc, RunCancelledError):
        return EXIT_INTERRUPTED if exc.signal == signal.SIGINT else EXIT_TERMINATED
    if isinstance(exc, EventHubIngestError):
        return EXIT_FAILED if exc.retryable else EXIT_CONFIG
    return EXIT_FAILED
