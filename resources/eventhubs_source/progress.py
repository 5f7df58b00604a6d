"""Live read progress: each reader's running count in a small blob the driver polls.

A Spark task cannot tell the driver how far it got while it runs on every deployment (no
accumulators under Spark Connect, and the client may not be reachable from executors), but
every executor already reaches the partition store. So a reader writes its running count, at
most every ``interval`` seconds, to one small blob per sub-range::

    {namespace}/{eventhub}/{consumer_group}/progress/{owner_id}/{read_id}/{partition}-{start}-{end}
        metadata: ehiread  (events read of the sub-range so far)

next to the SDK's ``ownership/`` and ``checkpoint/`` folders, which stay untouched. The driver
lists its read's folder (:func:`read_counts`) and deletes it when the read is over. Progress is
informational only: a write that fails is ignored, a stale or missing count changes nothing,
and the checkpoint still moves only after the verified write. A read shorter than ``interval``
writes nothing at all.

Runs on executors: imports no pydantic or Dagster; the store settings keep their secret out of
``repr`` and nothing here puts it in a message.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dagster_eventhub_ingest.resources.errors import ConfigurationError
from dagster_eventhub_ingest.resources.ranges import SeqRange
from dagster_eventhub_ingest.resources.store.settings import StoreSettings

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient

    from dagster_eventhub_ingest.resources.store.records import BlobBackend, HubRef

__all__ = [
    "PROGRESS_KIND",
    "ProgressTarget",
    "ProgressWriter",
    "delete_progress",
    "read_counts",
    "slow_read_delay",
    "totals",
]

logger = logging.getLogger(__name__)

PROGRESS_KIND = "progress"
READ_KEY = "ehiread"
#: Test hook: seconds a reader sleeps after each batch it receives (slows a read down so a test
#: sees progress mid-read). Unset, it costs one environment lookup per read.
SLOW_READ_ENV = "EHINGEST_SLOW_READ_SECONDS"
# A progress write must never hold a reader up for long: one short attempt, no retries.
_WRITE_TIMEOUT_SECONDS = 2


@dataclass(frozen=True)
class ProgressTarget:
    """Where the readers of one read write their counts (small, frozen, picklable).

    Attributes:
        store: the partition store's container (its secret stays out of ``repr``).
        prefix: the read's folder, ending with ``/``.
        interval: at most one write per reader per this many seconds.
    """

    store: StoreSettings
    prefix: str
    interval: float = 2.0

    def __post_init__(self) -> None:
        if not self.prefix.endswith("/"):
            raise ConfigurationError(f"progress prefix: {self.prefix!r} must end with '/'")
        if not self.interval > 0:
            raise ConfigurationError(f"progress interval: {self.interval!r} must be > 0 seconds")

    @classmethod
    def for_read(
        cls, store: StoreSettings, hub: HubRef, owner_id: str, read_id: str, interval: float
    ) -> ProgressTarget:
        """The target of one read of ``owner_id`` (``read_id``: unique per read)."""
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in owner_id)
        return cls(store, f"{hub.prefix(PROGRESS_KIND)}{safe.lower()}/{read_id}/", interval)

    def blob_name(self, partition_id: str, start: int, end: int) -> str:
        """The blob of one sub-range."""
        return f"{self.prefix}{partition_id}-{start}-{end}"

    def to_option(self) -> str:
        """The ``progress`` reader option (JSON; holds the store's secret, like
        ``connection_string`` does the hub's)."""
        s = self.store
        data: dict[str, Any] = {
            "container": s.container,
            "credential_type": s.credential_type,
            "create_container": s.create_container,
            "prefix": self.prefix,
            "interval": self.interval,
        }
        if s.connection_string:
            data["connection_string"] = s.connection_string
        if s.account_url:
            data["account_url"] = s.account_url
        if s.credential_options:
            data["credential_options"] = dict(s.credential_options)
        return json.dumps(data)

    @classmethod
    def from_option(cls, text: str) -> ProgressTarget:
        """Parse the ``progress`` reader option; errors never show the value (it has a secret)."""
        try:
            data = json.loads(text)
            store = StoreSettings(
                container=str(data["container"]),
                connection_string=data.get("connection_string"),
                account_url=data.get("account_url"),
                credential_type=data.get("credential_type", "connection_string"),
                credential_options=tuple(dict(data.get("credential_options") or {}).items()),
                create_container=bool(data.get("create_container", False)),
            )
            return cls(store, str(data["prefix"]), float(data.get("interval", 2.0)))
        except ConfigurationError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError):
            raise ConfigurationError(
                "progress: not the JSON object the ingestion run writes (container, prefix, "
                "interval and the store credential; the value is not shown, it holds a "
                "secret). Leave this option to the run."
            ) from None


class ProgressWriter:
    """One reader's count, written at most every ``target.interval`` seconds; never raises."""

    def __init__(self, target: ProgressTarget, partition_id: str, rng: SeqRange) -> None:
        self.target = target
        self.name = target.blob_name(partition_id, rng.start, rng.end)
        self._client: ContainerClient | None = None
        self._last = time.monotonic()
        self._written = -1
        self._broken = False

    def update(self, count: int, *, final: bool = False) -> None:
        """Record ``count`` events read; writes when the interval passed (or ``final`` after
        an earlier write, so the last figure shows the whole sub-range)."""
        if self._broken or count == self._written:
            return
        now = time.monotonic()
        if now - self._last < self.target.interval and not (final and self._written >= 0):
            return
        self._last = now
        try:
            if self._client is None:
                from dagster_eventhub_ingest.resources.store.azure_blob import container_client
                from dagster_eventhub_ingest.resources.store.retry import StoreRetryPolicy

                self._client = container_client(
                    self.target.store,
                    retry_policy=StoreRetryPolicy(retry_total=0),
                    connection_timeout=_WRITE_TIMEOUT_SECONDS,
                    read_timeout=_WRITE_TIMEOUT_SECONDS,
                )
            self._client.get_blob_client(self.name).upload_blob(
                b"", metadata={READ_KEY: str(count)}, overwrite=True
            )
            self._written = count
        except Exception as exc:  # progress is informational: the read goes on without it
            # The type only: a message may name the endpoint, never the key, but say less.
            logger.debug(
                "progress write failed (%s); no more progress from this reader",
                type(exc).__name__,
            )
            self._broken = True

    def close(self) -> None:
        """Close the HTTP connection, if one was opened."""
        if self._client is not None:
            try:
                self._client.close()
            except Exception:  # closing a client that failed is not worth a message
                logger.debug("progress client close failed", exc_info=True)


def read_counts(backend: BlobBackend, prefix: str) -> dict[str, dict[SeqRange, int]]:
    """Partition id -> sub-range -> events read, from the blobs under ``prefix`` (one list).

    Names that do not parse are ignored (progress is informational).
    """
    out: dict[str, dict[SeqRange, int]] = {}
    for record in backend.list(prefix):
        leaf = record.name[len(prefix) :]
        try:
            pid, start, end = leaf.rsplit("-", 2)
            count = int(record.metadata.get(READ_KEY, ""))
            out.setdefault(pid, {})[SeqRange(int(start), int(end))] = count
        except ValueError:
            continue
    return out


def delete_progress(backend: BlobBackend, prefix: str) -> None:
    """Delete a read's progress blobs (best effort: a leftover is a few bytes)."""
    try:
        for record in backend.list(prefix):
            backend.delete(record.name)
    except Exception:  # a leftover progress blob changes nothing
        logger.debug("could not delete progress blobs under %s", prefix, exc_info=True)


def slow_read_delay() -> float:
    """Seconds to sleep after each received batch (the ``EHINGEST_SLOW_READ_SECONDS`` hook)."""
    raw = os.environ.get(SLOW_READ_ENV, "")
    if not raw:
        return 0.0
    try:
        return max(0.0, float(raw))
    except ValueError:
        raise ConfigurationError(
            f"{SLOW_READ_ENV}: {raw!r} is not a number of seconds (a test hook; unset it)"
        ) from None


def totals(counts: Mapping[str, Mapping[SeqRange, int]]) -> dict[str, int]:
    """Events read per partition, over its sub-ranges."""
    return {pid: sum(by.values()) for pid, by in counts.items()}
