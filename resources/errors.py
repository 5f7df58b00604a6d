"""The one exception hierarchy of dagster-eventhub-ingest.

Every error the package raises on purpose derives from :class:`EventHubIngestError`. Each
subclass says when it is raised and whether retrying can help, so callers (the ingestion run,
Dagster's retry policy, a cron wrapper) can tell a transient failure from a configuration error.
Messages never contain secrets: build them with :func:`redact` when a value may hold one.
"""

from __future__ import annotations

import difflib
import re

__all__ = [
    "CheckpointAheadError",
    "CheckpointRegressionError",
    "ConfigurationError",
    "CorruptStoreStateError",
    "DataLossError",
    "DuplicateOwnerError",
    "EventHubIngestError",
    "EventHubUnavailableError",
    "OwnershipLostError",
    "RangeError",
    "RunCancelledError",
    "SinkError",
    "StoreUnavailableError",
    "did_you_mean",
    "redact",
]

# Keys whose values are secrets in Azure connection strings and SAS query strings.
_SECRET_KEYS = ("SharedAccessKey", "AccountKey", "SharedAccessSignature", "sig")
_SECRET_RE = re.compile(
    r"(?i)\b(" + "|".join(_SECRET_KEYS) + r")=([^;&\s'\"]*)",
)


def redact(text: str) -> str:
    """Return ``text`` with every connection-string or SAS secret replaced by ``***``.

    Example: ``redact("AccountName=a;AccountKey=abc==")`` -> ``"AccountName=a;AccountKey=***"``.
    """
    return _SECRET_RE.sub(lambda m: f"{m.group(1)}=***", text)


def did_you_mean(word: str, valid: tuple[str, ...] | list[str]) -> str:
    """``"did you mean 'x'? "`` for the closest valid spelling of ``word`` (compared without
    case), or ``""``."""
    by_lower: dict[str, str] = {}
    for spelling in valid:
        by_lower.setdefault(spelling.lower(), spelling)
    match = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return f"did you mean {by_lower[match[0]]!r}? " if match else ""


class EventHubIngestError(Exception):
    """Root of every error this package raises on purpose; retrying depends on the subclass."""

    retryable: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(redact(message))


class ConfigurationError(EventHubIngestError, ValueError):
    """Raised at construction when a setting is missing or invalid; retrying cannot help."""


class DuplicateOwnerError(ConfigurationError):
    """Raised before anything is read when another live process runs with the same owner id
    (both would read and commit the same batches); retrying cannot help while it runs: give
    each process its own owner id."""


class StoreUnavailableError(EventHubIngestError):
    """Raised when Blob Storage cannot be reached after bounded retries; retrying later may help."""

    retryable = True


class EventHubUnavailableError(EventHubIngestError):
    """Raised when the Event Hubs endpoint cannot be reached after retries; retrying may help."""

    retryable = True


class OwnershipLostError(EventHubIngestError):
    """Raised when a lease this owner held was taken by another (ETag changed); do not retry the
    write: drop the partition and let the balancer decide again."""


class CheckpointRegressionError(EventHubIngestError):
    """Raised when a checkpoint would move backwards; retrying cannot help (a logic error)."""


class CheckpointAheadError(EventHubIngestError):
    """Raised before reading when a checkpoint is one the hub cannot have produced (beyond its
    last event, negative, or written for a hub since deleted and re-created); retrying cannot
    help: reset the partition (``on_checkpoint_ahead: reset_to_earliest``) or fix the blob."""


class CorruptStoreStateError(EventHubIngestError):
    """Raised when a blob's metadata cannot be parsed (e.g. edited by hand); fix or delete the
    named blob first, retrying alone cannot help."""


class RangeError(EventHubIngestError, ValueError):
    """Raised for an impossible range (unknown partition, end before start); retrying cannot
    help."""


class DataLossError(EventHubIngestError):
    """Raised when events in a requested range are no longer readable (retention, gap); retrying
    cannot help: replay from what is left or set ``on_data_loss: skip``."""


class SinkError(EventHubIngestError):
    """Raised when the sink cannot be written; ``retryable`` is set per error from its cause:
    True for a transient one (an I/O timeout, a reset connection, a storage 5xx, a lost
    executor, a full disk or quota: freeing space helps), False when retrying cannot help
    (permission denied, a read-only disk, a bad path, a schema or layout mismatch)."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class RunCancelledError(EventHubIngestError):
    """Raised when a run was asked to stop (SIGTERM, SIGINT, an orchestrator's kill): it read
    nothing further, released its leases with their pending intents kept and stopped the Spark
    work it started; running again continues where it stopped (``signal``: the signal that
    asked, if one did)."""

    retryable = True

    def __init__(self, message: str, *, signal: int | None = None) -> None:
        super().__init__(message)
        self.signal = signal
