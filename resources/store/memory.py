"""An in-memory :class:`~dagster_eventhub_ingest.resources.store.records.BlobBackend` with Azure
Blob's CAS semantics.

For fast unit tests and the strategy simulator. ETags change on every write, Last-Modified is
taken from an injectable clock (the simulator's), create-only fails when the blob exists and
If-Match fails when the ETag moved or the blob is gone, exactly as on Azure.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Mapping
from datetime import datetime, timezone

from dagster_eventhub_ingest.resources.store.partition_store import Clock
from dagster_eventhub_ingest.resources.store.records import BlobRecord

__all__ = ["InMemoryBackend"]


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


class InMemoryBackend:
    """Thread-safe dict of blobs; ``clock`` is the store's clock (default: real UTC time).

    ``operations`` counts every call, as a storage bill would (for the simulator's metrics).
    """

    def __init__(self, clock: Clock = _utcnow) -> None:
        self._clock = clock
        self._blobs: dict[str, BlobRecord] = {}
        self._lock = threading.Lock()
        self._etags = itertools.count(1)
        self.operations = 0
        self.conflicts = 0

    def now(self) -> datetime:
        return self._clock()

    def get(self, name: str) -> BlobRecord | None:
        with self._lock:
            self.operations += 1
            return self._blobs.get(name)

    def list(self, prefix: str) -> list[BlobRecord]:
        with self._lock:
            self.operations += 1
            return [b for n, b in sorted(self._blobs.items()) if n.startswith(prefix)]

    def put(
        self,
        name: str,
        metadata: Mapping[str, str],
        *,
        etag: str | None,
        deadline: datetime | None = None,
    ) -> BlobRecord | None:
        # ``deadline`` bounds retries; a call here never fails transiently.
        with self._lock:
            self.operations += 1
            current = self._blobs.get(name)
            if (etag is None and current is not None) or (
                etag is not None and (current is None or current.etag != etag)
            ):
                self.conflicts += 1
                return None
            record = BlobRecord(name, dict(metadata), f'"0x{next(self._etags):X}"', self._clock())
            self._blobs[name] = record
            return record

    def delete(self, name: str, *, etag: str | None = None) -> bool:
        with self._lock:
            self.operations += 1
            current = self._blobs.get(name)
            if current is None or (etag is not None and current.etag != etag):
                self.conflicts += 1
                return False
            del self._blobs[name]
            return True
