"""The partition store's records: blob names and metadata keys, the backend protocol, and what a
blob says (checkpoints, intents, ownership). Plain values; the logic that reads and writes them
is :mod:`dagster_eventhub_ingest.resources.store.partition_store`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from dagster_eventhub_ingest.resources.ranges import SeqRange

__all__ = [
    "BlobBackend",
    "BlobRecord",
    "Checkpoint",
    "HubRef",
    "Intent",
    "Ownership",
    "generation_of",
]

OWNER_KEY = "ownerid"
SEQ_KEY = "sequencenumber"
OFFSET_KEY = "offset"
EPOCH_KEY = "ehiepoch"
INSTANCE_KEY = "ehiinstance"
INTENT_START_KEY = "ehiintentstart"
INTENT_END_KEY = "ehiintentend"
INTENT_OWNER_KEY = "ehiintentowner"
INTENT_LAYOUT_KEY = "ehiintentlayout"
INTENT_GENERATION_KEY = "ehiintentgeneration"
OWN_SEQ_KEY = "ehisequencenumber"
OWN_OFFSET_KEY = "ehioffset"
HUB_CREATED_KEY = "ehihubcreated"
RESET_KEY = "ehireset"
GENERATION_KEY = "ehigeneration"
LANDED_KEY = "ehilanded"
#: Store-clock time kept between the last retry of a write on a held lease and the lease's
#: expiry: HTTP dates have one-second resolution, and this client's clock lags the service's
#: by up to one second (docs/store.md, "Expiry on the store's clock").
LEASE_MARGIN = timedelta(seconds=2)
OUR_KEYS = (
    EPOCH_KEY,
    INTENT_START_KEY,
    INTENT_END_KEY,
    INTENT_OWNER_KEY,
    INTENT_LAYOUT_KEY,
    INTENT_GENERATION_KEY,
    OWN_SEQ_KEY,
    OWN_OFFSET_KEY,
    HUB_CREATED_KEY,
    RESET_KEY,
    GENERATION_KEY,
    LANDED_KEY,
)


@dataclass(frozen=True)
class BlobRecord:
    """One blob as the store sees it: name, metadata, ETag and Last-Modified (store clock)."""

    name: str
    metadata: Mapping[str, str]
    etag: str
    last_modified: datetime


class BlobBackend(Protocol):
    """Minimal conditional-write blob API; implementations must keep Azure's CAS semantics.

    ETags are handed out in one form (the store compares them as strings).
    """

    def now(self) -> datetime:
        """The store's current time (the service's clock, never the local wall clock)."""
        ...

    def get(self, name: str) -> BlobRecord | None:
        """The blob named ``name`` with its metadata, or None if it does not exist."""
        ...

    def list(self, prefix: str) -> list[BlobRecord]:
        """Every blob whose name starts with ``prefix``, with metadata."""
        ...

    def put(
        self,
        name: str,
        metadata: Mapping[str, str],
        *,
        etag: str | None,
        deadline: datetime | None = None,
    ) -> BlobRecord | None:
        """Write metadata by compare-and-set; None when the condition failed (a lost race).

        ``etag=None`` means create-only (``If-None-Match: *``); otherwise ``If-Match: etag``
        (a blob deleted meanwhile is also a lost race). Replaces all metadata. ``deadline``
        (store clock; the store passes it only for a write on a held lease): a backend that
        retries transient failures stops retrying by then.
        """
        ...

    def delete(self, name: str, *, etag: str | None = None) -> bool:
        """Delete a blob (If-Match when ``etag`` is given); False if the condition failed."""
        ...


@dataclass(frozen=True)
class HubRef:
    """Which hub and consumer group a store serves; names blobs as the Azure SDK does."""

    fully_qualified_namespace: str
    eventhub_name: str
    consumer_group: str = "$Default"

    def prefix(self, kind: str) -> str:
        """Blob-name prefix for ``kind`` (``ownership`` or ``checkpoint``), lower-cased."""
        return (
            f"{self.fully_qualified_namespace}/{self.eventhub_name}/{self.consumer_group}/{kind}/"
        ).lower()

    def describe(self) -> str:
        """Human-readable name for log lines and errors."""
        return f"{self.fully_qualified_namespace}/{self.eventhub_name}[{self.consumer_group}]"


@dataclass(frozen=True)
class Checkpoint:
    """The last event processed in a partition (SDK meaning: resume after it).

    ``hub_created_ms``: the hub's creation time (ms since the epoch, the service's own value)
    when this checkpoint was written, if this package wrote it; a different value now means the
    hub was deleted and re-created and the checkpoint belongs to the old one. ``reset``: the
    note of the last reset (``on_checkpoint_ahead: reset_to_earliest``), if any.
    ``generation``: the hub generation (the re-created hub's creation time, ms) recorded by a
    reset after a re-creation and carried forward; None if the hub never was (see
    :func:`generation_of`).
    """

    partition_id: str
    sequence_number: int
    offset: str | None = None
    hub_created_ms: int | None = field(default=None, compare=False)
    reset: str | None = field(default=None, compare=False)
    generation: int | None = field(default=None, compare=False)
    #: Events this project landed in the sink for the partition up to this checkpoint (the
    #: sink's row count for it); None when unknown (a checkpoint written by an SDK processor,
    #: or by a version that did not count).
    landed: int | None = field(default=None, compare=False)


def generation_of(*checkpoints: Checkpoint | None) -> int | None:
    """The hub generation of a partition: the latest one any of its checkpoint blobs records.

    None (the hub was never re-created and reset): batch keys stay ``<partition>-<start>-<end>``.
    A generation is the re-created hub's creation time, so a later one is larger; taking the
    largest keeps it when one blob lost it (an SDK processor rewrites the checkpoint blob).
    """
    found = [c.generation for c in checkpoints if c is not None and c.generation is not None]
    return max(found) if found else None


@dataclass(frozen=True)
class Intent:
    """A write-ahead record: the exact inclusive sequence range ``[start, end]`` being ingested.

    ``layout``: the sink layout (format, partition columns) its batch is written with, so a
    replay never writes it into another one (None: recorded before layouts were).
    ``generation``: the hub generation its batch key names (None: none), so a replay writes
    exactly the batch key the first attempt wrote.
    """

    start: int
    end: int
    owner_id: str
    layout: str | None = field(default=None, compare=False)
    generation: int | None = field(default=None, compare=False)

    @property
    def range(self) -> SeqRange:
        """The intent's sequence numbers."""
        return SeqRange(self.start, self.end)


@dataclass(frozen=True)
class Ownership:
    """One partition's ownership blob as last seen; ``etag`` is the token for the next CAS."""

    partition_id: str
    owner_id: str
    etag: str
    last_modified: datetime
    epoch: int = 0
    intent: Intent | None = None
    # The process of ``owner_id`` that claimed it
    # (``dagster_eventhub_ingest.ops.balancing.liveness.OwnerInstance``); "" when claimed by a
    # version that did not record it.
    instance: str = ""
    progress: Checkpoint | None = None
    # The blob's full metadata when this was read from the store. The next write is a CAS on
    # ``etag``, so this is exactly what the blob holds if that write succeeds: it lets renew,
    # intent and checkpoint write in one call instead of a read plus a write. None (built by
    # hand): the store reads the blob first.
    metadata: Mapping[str, str] | None = field(default=None, repr=False, compare=False)

    @property
    def is_released(self) -> bool:
        """True when nobody holds the lease (SDK convention: empty owner id)."""
        return not self.owner_id

    def is_expired(self, now: datetime, expiry: timedelta) -> bool:
        """True when the lease was not renewed within ``expiry`` of ``now`` (store clock)."""
        return self.is_released or now - self.last_modified >= expiry
