"""The partition store: leases, fenced checkpoints and write-ahead intents over blob CAS.

The logic lives here once, over a tiny :class:`BlobBackend` protocol (get, list, conditional
put, the store's clock). Two backends implement it with the same compare-and-set semantics:
Azure Blob Storage (``dagster_eventhub_ingest.resources.blob_store``) and an in-memory one for fast
tests (``dagster_eventhub_ingest.resources.memory_store``). The contract tests run against both.

Blob layout is the one ``azure-eventhub-checkpointstoreblob`` uses, lower-cased::

    {fully_qualified_namespace}/{eventhub}/{consumer_group}/ownership/{partition_id}
        metadata: ownerid            (SDK key; "" when released)
                  ehiepoch           (ours: bumped by every claim, fences zombies)
                  ehiinstance        (ours: which process of that owner id claimed it)
                  ehiintentstart/end (ours: write-ahead range being ingested, inclusive)
                  ehiintentowner     (ours: who recorded the intent)
                  ehiintentlayout    (ours: the sink layout the intent is written with)
                  ehiintentgeneration (ours: the hub generation the intent's batch key names)
                  ehisequencenumber, ehioffset  (ours: fenced copy of the checkpoint)
                  ehihubcreated      (ours: the hub's creation time, ms, when it was checkpointed)
                  ehireset           (ours: why and when the checkpoint was last reset)
                  ehigeneration      (ours: the hub generation, set by a reset after the hub
                                      was re-created; part of every later batch key)
                  ehilanded          (ours: events this project landed in the sink for the
                                      partition, counted at each checkpoint; absent: unknown)
    {fully_qualified_namespace}/{eventhub}/{consumer_group}/checkpoint/{partition_id}
        metadata: sequencenumber, offset  (SDK keys, same meaning)
                  ehihubcreated, ehireset, ehigeneration, ehilanded  (ours, as above; the
                                                           SDK ignores them)

Why the fenced copy lives on the ownership blob: Blob Storage has no multi-blob transaction, and
the SDK's checkpoint blob only exists after a first checkpoint, so it cannot carry the fence.
Every claim changes the ownership blob's ETag, so a checkpoint written as a CAS on that blob can
only succeed for the current owner. The SDK checkpoint blob is then mirrored forward (CAS, never
backwards); the effective checkpoint is the later of the two, which also picks up progress an
``EventProcessorClient`` made on the same consumer group.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from dagster_eventhub_ingest.resources.errors import (
    CheckpointRegressionError,
    CorruptStoreStateError,
    OwnershipLostError,
)
from dagster_eventhub_ingest.resources.ranges import SeqRange

__all__ = [
    "BlobBackend",
    "BlobRecord",
    "Checkpoint",
    "HubRef",
    "Intent",
    "Ownership",
    "PartitionStore",
    "generation_of",
]

logger = logging.getLogger(__name__)

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
_OUR_KEYS = (
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


def _int(record: BlobRecord, key: str) -> int | None:
    raw = record.metadata.get(key)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise CorruptStoreStateError(
            f"blob {record.name!r}: metadata {key}={raw!r} is not an integer. Someone edited it "
            "by hand? Restore a valid value or delete the blob (deleting an ownership blob "
            "forgets its pending intent and its copy of the checkpoint; with both checkpoint "
            "copies gone the next run continues after what the sink holds)."
        ) from None


class PartitionStore:
    """Leases, fenced checkpoints and intents for one hub and consumer group.

    Args:
        backend: where blobs live (Azure Blob Storage or the in-memory backend).
        hub: the Event Hub and consumer group whose partitions this store tracks.
        instance: this process's instance token
        (``dagster_eventhub_ingest.ops.balancing.liveness``), recorded on
            every lease it claims and on its heartbeat, so two processes given the same owner
            id can tell each other apart; None records none.
        lease_expiry: the leases' expiry. Given, a write on a held lease (renew, intent,
            checkpoint, release) is retried only while the lease is still valid, with
            :data:`LEASE_MARGIN` to spare (docs/store.md, "Transient errors"): a retried
            renewal never lets the lease expire unnoticed. None: each call's own budget.

    Losing a race when claiming or releasing is a normal result (``None`` / ``False``); using a
    lease that another owner has taken raises :class:`OwnershipLostError`.
    """

    def __init__(
        self,
        backend: BlobBackend,
        hub: HubRef,
        *,
        instance: str | None = None,
        lease_expiry: timedelta | None = None,
    ) -> None:
        self.backend = backend
        self.hub = hub
        self.instance = instance
        self.lease_expiry = lease_expiry

    # -- reading -------------------------------------------------------------------------------
    def now(self) -> datetime:
        """The store's clock; compare it with ``Ownership.last_modified`` to judge expiry."""
        return self.backend.now()

    def _ownership_name(self, partition_id: str) -> str:
        return self.hub.prefix("ownership") + partition_id.lower()

    def _checkpoint_name(self, partition_id: str) -> str:
        return self.hub.prefix("checkpoint") + partition_id.lower()

    def _parse_ownership(self, record: BlobRecord) -> Ownership:
        pid = record.name.rsplit("/", 1)[-1]
        start, end = _int(record, INTENT_START_KEY), _int(record, INTENT_END_KEY)
        if (start is None) != (end is None) or (
            start is not None and end is not None and end < start
        ):
            raise CorruptStoreStateError(
                f"blob {record.name!r}: intent range [{start}, {end}] is incomplete or reversed. "
                "Someone edited it by hand? Delete both ehiintent* keys only if you know the "
                "range was never written, otherwise restore them."
            )
        intent = None
        if start is not None and end is not None:
            intent = Intent(
                start,
                end,
                record.metadata.get(INTENT_OWNER_KEY, ""),
                layout=record.metadata.get(INTENT_LAYOUT_KEY) or None,
                generation=_int(record, INTENT_GENERATION_KEY),
            )
        seq = _int(record, OWN_SEQ_KEY)
        progress = None
        if seq is not None:
            progress = Checkpoint(
                pid,
                seq,
                record.metadata.get(OWN_OFFSET_KEY) or None,
                hub_created_ms=_int(record, HUB_CREATED_KEY),
                reset=record.metadata.get(RESET_KEY) or None,
                generation=_int(record, GENERATION_KEY),
                landed=_int(record, LANDED_KEY),
            )
        return Ownership(
            partition_id=pid,
            owner_id=record.metadata.get(OWNER_KEY, ""),
            etag=record.etag,
            last_modified=record.last_modified,
            epoch=_int(record, EPOCH_KEY) or 0,
            intent=intent,
            instance=record.metadata.get(INSTANCE_KEY, ""),
            progress=progress,
            metadata=dict(record.metadata),
        )

    def _parse_checkpoint(self, record: BlobRecord) -> Checkpoint:
        pid = record.name.rsplit("/", 1)[-1]
        seq = _int(record, SEQ_KEY)
        if seq is None:
            raise CorruptStoreStateError(
                f"blob {record.name!r} has no 'sequencenumber' metadata. Someone edited it by "
                "hand? Restore it, or delete the blob: the next run continues after what the "
                "sink holds (or the ownership blob's copy of the checkpoint, if later)."
            )
        return Checkpoint(
            pid,
            seq,
            record.metadata.get(OFFSET_KEY) or None,
            hub_created_ms=_int(record, HUB_CREATED_KEY),
            reset=record.metadata.get(RESET_KEY) or None,
            generation=_int(record, GENERATION_KEY),
            landed=_int(record, LANDED_KEY),
        )

    def get_ownership(self, partition_id: str) -> Ownership | None:
        """The ownership of one partition, or None if it was never claimed."""
        record = self.backend.get(self._ownership_name(partition_id))
        return None if record is None else self._parse_ownership(record)

    def list_ownership(self) -> dict[str, Ownership]:
        """Every ownership blob of this hub, keyed by partition id."""
        return {
            o.partition_id: o
            for o in map(self._parse_ownership, self.backend.list(self.hub.prefix("ownership")))
        }

    def list_sdk_checkpoints(self) -> dict[str, Checkpoint]:
        """The checkpoint blobs exactly as the Azure SDK reads them."""
        return {
            c.partition_id: c
            for c in map(self._parse_checkpoint, self.backend.list(self.hub.prefix("checkpoint")))
        }

    def list_checkpoints(
        self, ownerships: Mapping[str, Ownership] | None = None
    ) -> dict[str, Checkpoint]:
        """Effective checkpoint per partition: the later of the SDK blob and the fenced copy."""
        result = self.list_sdk_checkpoints()
        owned = self.list_ownership() if ownerships is None else ownerships
        for pid, own in owned.items():
            if own.progress is not None and (
                pid not in result or own.progress.sequence_number > result[pid].sequence_number
            ):
                result[pid] = own.progress
        return result

    # -- leases --------------------------------------------------------------------------------
    def claim(
        self, partition_id: str, owner_id: str, previous: Ownership | None
    ) -> Ownership | None:
        """Take ``partition_id`` for ``owner_id`` by CAS on ``previous`` (None: create-only).

        Keeps the pending intent and fenced checkpoint of the previous owner (a takeover must
        replay the intent) and bumps the epoch. Returns None when another owner won the race.
        """
        metadata: dict[str, str] = {}
        if previous is not None:
            current = previous.metadata
            if current is None:
                record = self.backend.get(self._ownership_name(partition_id))
                if record is None or record.etag != previous.etag:
                    self._log_lost(partition_id, owner_id, "claim")
                    return None
                current = record.metadata
            metadata = {k: v for k, v in current.items() if k in _OUR_KEYS}
        metadata[OWNER_KEY] = owner_id
        if self.instance:
            metadata[INSTANCE_KEY] = self.instance
        metadata[EPOCH_KEY] = str((previous.epoch if previous else 0) + 1)
        name = self._ownership_name(partition_id)
        written = self.backend.put(
            name, metadata, etag=previous.etag if previous is not None else None
        )
        if written is None:
            written = self._confirm(name, metadata)
        if written is None:
            self._log_lost(partition_id, owner_id, "claim")
            return None
        logger.info(
            "claimed hub=%s partition=%s owner=%s epoch=%s",
            self.hub.describe(),
            partition_id,
            owner_id,
            metadata[EPOCH_KEY],
        )
        return self._parse_ownership(written)

    def _current(self, own: Ownership, action: str) -> Ownership:
        """``own`` re-read from the store; OwnershipLostError if its ETag moved."""
        record = self.backend.get(self._ownership_name(own.partition_id))
        if record is None or record.etag != own.etag:
            raise self._lost(own, action)
        return self._parse_ownership(record)

    def _update(self, own: Ownership, changes: Mapping[str, str | None], action: str) -> Ownership:
        if own.metadata is None:
            own = self._current(own, action)
        assert own.metadata is not None
        metadata = dict(own.metadata)
        for key, value in changes.items():
            if value is None:
                metadata.pop(key, None)
            else:
                metadata[key] = value
        name = self._ownership_name(own.partition_id)
        if self.lease_expiry is None:
            written = self.backend.put(name, metadata, etag=own.etag)
        else:
            # Retrying past this, the lease may already be another owner's: the write then
            # fails its condition anyway, and the caller must hear of the outage in time.
            deadline = own.last_modified + self.lease_expiry - LEASE_MARGIN
            written = self.backend.put(name, metadata, etag=own.etag, deadline=deadline)
        if written is None:
            written = self._confirm(name, metadata)
        if written is None:
            raise self._lost(own, action)
        return self._parse_ownership(written)

    def _confirm(self, name: str, metadata: Mapping[str, str]) -> BlobRecord | None:
        """After a failed condition, tell a lost race from a lost response by reading again.

        The client retries a write whose response was lost (a dropped connection); the retry
        then fails its condition because the first attempt changed the ETag. Only then (the
        backend says the condition failed on a retried attempt) is the blob read: if it holds
        exactly what this write put (every claim bumps the epoch, so another owner's write
        never looks the same), the write succeeded: return the blob as it is now.
        """
        retried = getattr(self.backend, "last_put_retried", None)
        if retried is None or not retried():
            return None  # a single attempt lost its condition: a real lost race
        record = self.backend.get(name)
        if record is not None and dict(record.metadata) == dict(metadata):
            logger.info("write to %s succeeded; its response was lost (confirmed by reading)", name)
            return record
        return None

    def renew(self, own: Ownership) -> Ownership:
        """Extend the lease (new Last-Modified); raises OwnershipLostError if it was taken."""
        return self._update(own, {}, "renew")

    def release(self, own: Ownership) -> bool:
        """Give the lease up, keeping intent and checkpoint; False if it was already taken."""
        try:
            self._update(own, {OWNER_KEY: ""}, "release")
        except OwnershipLostError:
            return False
        logger.info(
            "released hub=%s partition=%s owner=%s",
            self.hub.describe(),
            own.partition_id,
            own.owner_id,
        )
        return True

    # -- write-ahead intent and fenced checkpoint ----------------------------------------------
    def record_intent(
        self,
        own: Ownership,
        start: int,
        end: int,
        *,
        layout: str | None = None,
        generation: int | None = None,
    ) -> Ownership:
        """Record ``[start, end]`` (inclusive sequence numbers) before reading it (CAS).

        ``layout`` (the sink's format and partition columns) is kept with it, so a takeover
        can refuse to replay the batch into a different layout; ``generation`` (the hub
        generation its batch key names), so a replay writes the same key.
        """
        if end < start:
            raise ValueError(f"intent end {end} is before start {start}")
        return self._update(
            own,
            {
                INTENT_START_KEY: str(start),
                INTENT_END_KEY: str(end),
                INTENT_OWNER_KEY: own.owner_id,
                INTENT_LAYOUT_KEY: layout,
                INTENT_GENERATION_KEY: None if generation is None else str(generation),
            },
            "record intent",
        )

    def checkpoint(
        self,
        own: Ownership,
        sequence_number: int,
        offset: str | None,
        *,
        hub_created_ms: int | None = None,
        landed_events: int | None = None,
    ) -> Ownership:
        """Move the checkpoint to ``sequence_number`` and clear a completed intent.

        ``landed_events``: how many events the batch up to it landed in the sink; added to the
        partition's landed count (``ehilanded``) in the same CAS, so the count moves exactly
        once per batch; it is unknown (and stays so) when the previous checkpoint has none (one
        written before counts were kept). None leaves the count as it is.

        Fenced: only the holder of ``own`` (current ETag) can do it, otherwise
        OwnershipLostError and nothing changes. Never backwards: CheckpointRegressionError.
        The SDK checkpoint blob is mirrored afterwards, also never backwards.
        ``hub_created_ms`` (the hub's creation time) is recorded with it, so a later run can
        tell that the hub was re-created since. The partition's hub generation
        (:func:`generation_of` both blobs) is carried forward onto both.
        """
        if own.metadata is None:
            own = self._current(own, "checkpoint")
        sdk_record = self.backend.get(self._checkpoint_name(own.partition_id))
        current = own.progress
        if sdk_record is not None:
            sdk = self._parse_checkpoint(sdk_record)
            if current is None or sdk.sequence_number > current.sequence_number:
                current = sdk
        if current is not None and sequence_number < current.sequence_number:
            # A zombie's view is stale: tell it that it lost the lease, which is the cause,
            # rather than a regression it could not have seen.
            self._current(own, "checkpoint")
            raise CheckpointRegressionError(
                f"hub={self.hub.describe()} partition={own.partition_id}: checkpoint would move "
                f"back from {current.sequence_number} to {sequence_number}"
            )
        changes: dict[str, str | None] = {
            OWN_SEQ_KEY: str(sequence_number),
            OWN_OFFSET_KEY: offset or "",
        }
        if hub_created_ms is not None:
            changes[HUB_CREATED_KEY] = str(hub_created_ms)
        generation = generation_of(
            own.progress, self._parse_checkpoint(sdk_record) if sdk_record is not None else None
        )
        if generation is None and own.intent is not None and own.intent.end <= sequence_number:
            generation = own.intent.generation  # the key its batch was written under
        if generation is not None:
            changes[GENERATION_KEY] = str(generation)
        # What this project landed so far: the fenced copy's count (an SDK processor moving
        # the checkpoint lands nothing in this sink), else the SDK blob's (our mirror), else
        # nothing yet.
        if own.progress is not None:
            landed = own.progress.landed
        elif sdk_record is not None:
            landed = self._parse_checkpoint(sdk_record).landed
        else:
            landed = 0
        if landed_events is not None:
            landed = None if landed is None else landed + landed_events
            changes[LANDED_KEY] = None if landed is None else str(landed)
        else:  # the count stays what the fenced copy says (none yet: unknown, not 0)
            landed = own.progress.landed if own.progress is not None else None
        if own.intent is not None and own.intent.end <= sequence_number:
            changes.update(
                {
                    INTENT_START_KEY: None,
                    INTENT_END_KEY: None,
                    INTENT_OWNER_KEY: None,
                    INTENT_LAYOUT_KEY: None,
                    INTENT_GENERATION_KEY: None,
                }
            )
        updated = self._update(own, changes, "checkpoint")
        self._mirror_checkpoint(
            Checkpoint(
                own.partition_id,
                sequence_number,
                offset,
                hub_created_ms=hub_created_ms,
                generation=generation,
                landed=landed,
            ),
            sdk_record,
        )
        logger.info(
            "checkpoint hub=%s partition=%s owner=%s sequence_number=%s",
            self.hub.describe(),
            own.partition_id,
            own.owner_id,
            sequence_number,
        )
        return updated

    def _mirror_checkpoint(
        self, cp: Checkpoint, record: BlobRecord | None, attempts: int = 5
    ) -> None:
        name = self._checkpoint_name(cp.partition_id)
        for attempt in range(attempts):
            if attempt:
                record = self.backend.get(name)
            if record is not None:
                existing = self._parse_checkpoint(record)
                if existing.sequence_number >= cp.sequence_number:
                    return
            metadata = {SEQ_KEY: str(cp.sequence_number), OFFSET_KEY: cp.offset or ""}
            if cp.hub_created_ms is not None:
                metadata[HUB_CREATED_KEY] = str(cp.hub_created_ms)
            if cp.generation is not None:
                metadata[GENERATION_KEY] = str(cp.generation)
            if cp.landed is not None:
                metadata[LANDED_KEY] = str(cp.landed)
            if record is not None:
                # Keep keys other tools may have added; the SDK keys keep their meaning.
                metadata = {**record.metadata, **metadata}
                if cp.landed is None:
                    metadata.pop(LANDED_KEY, None)  # unknown now: never a stale count
            if self.backend.put(name, metadata, etag=record.etag if record else None) is not None:
                return
        # The fenced copy on the ownership blob is authoritative; the mirror catches up next time.
        logger.warning(
            "hub=%s partition=%s: could not mirror checkpoint %s to the SDK blob after %d tries",
            self.hub.describe(),
            cp.partition_id,
            cp.sequence_number,
            attempts,
        )

    def reset_checkpoint(
        self,
        own: Ownership,
        sequence_number: int,
        offset: str | None,
        note: str,
        *,
        hub_created_ms: int | None = None,
        generation: int | None = None,
        landed_unknown: bool = False,
    ) -> Ownership:
        """Move the checkpoint to ``sequence_number`` even backwards, and drop a pending intent.

        Only for a checkpoint the hub cannot have produced (ahead of it, or written for a hub
        since re-created): the caller has decided, on the user's explicit opt-in, to restart
        the partition; or for one behind what the sink already holds (lost, or restored from
        an older copy), moved past it. Fenced like :meth:`checkpoint`; ``note`` (why, from
        what, when) is kept in the ``ehireset`` metadata of both blobs. The SDK blob is
        overwritten by CAS. ``generation`` (a new hub generation, after a re-creation) replaces
        the one both blobs carry; None keeps theirs. ``landed_unknown``: the landed count
        (``ehilanded``) no longer holds (events landed that it never counted): dropped.
        """
        changes: dict[str, str | None] = {
            OWN_SEQ_KEY: str(sequence_number),
            OWN_OFFSET_KEY: offset or "",
            RESET_KEY: note,
            HUB_CREATED_KEY: None if hub_created_ms is None else str(hub_created_ms),
            INTENT_START_KEY: None,
            INTENT_END_KEY: None,
            INTENT_OWNER_KEY: None,
            INTENT_LAYOUT_KEY: None,
            INTENT_GENERATION_KEY: None,
        }
        if generation is not None:
            changes[GENERATION_KEY] = str(generation)
        if landed_unknown:
            changes[LANDED_KEY] = None
        updated = self._update(own, changes, "reset the checkpoint")
        name = self._checkpoint_name(own.partition_id)
        for _ in range(5):
            record = self.backend.get(name)
            metadata = dict(record.metadata) if record is not None else {}
            metadata.update(
                {SEQ_KEY: str(sequence_number), OFFSET_KEY: offset or "", RESET_KEY: note}
            )
            metadata.pop(HUB_CREATED_KEY, None)
            if landed_unknown:
                metadata.pop(LANDED_KEY, None)
            if hub_created_ms is not None:
                metadata[HUB_CREATED_KEY] = str(hub_created_ms)
            if generation is not None:
                metadata[GENERATION_KEY] = str(generation)
            if self.backend.put(name, metadata, etag=record.etag if record else None) is not None:
                break
        else:
            # Left ahead, the SDK blob would win as the effective checkpoint again: say so.
            raise OwnershipLostError(
                f"hub={self.hub.describe()} partition={own.partition_id}: the SDK checkpoint "
                "blob kept changing while resetting it (another processor on this consumer "
                "group?); nothing was read. Stop the other processor and run again."
            )
        logger.warning(
            "checkpoint reset hub=%s partition=%s owner=%s to sequence_number=%s: %s",
            self.hub.describe(),
            own.partition_id,
            own.owner_id,
            sequence_number,
            note,
        )
        return updated

    # -- helpers -------------------------------------------------------------------------------
    def _log_lost(self, partition_id: str, owner_id: str, action: str) -> None:
        logger.info(
            "lost race to %s hub=%s partition=%s owner=%s",
            action,
            self.hub.describe(),
            partition_id,
            owner_id,
        )

    def _lost(self, own: Ownership, action: str) -> OwnershipLostError:
        return OwnershipLostError(
            f"owner {own.owner_id!r} lost partition {own.partition_id} of hub "
            f"{self.hub.describe()} (tried to {action}); another owner claimed it. Drop the "
            "partition; nothing was written to the store."
        )


Clock = Callable[[], datetime]
