"""The partition store: leases, fenced checkpoints and write-ahead intents over blob CAS.

The logic lives here once, over a tiny :class:`BlobBackend` protocol (get, list, conditional put,
the store's clock). Two backends implement it with the same compare-and-set semantics: Azure Blob
Storage (``dagster_eventhub_ingest.resources.store.azure_blob``) and an in-memory one for fast tests
(``dagster_eventhub_ingest.resources.store.memory``). The contract tests run against both.

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
from datetime import datetime, timedelta

from dagster_eventhub_ingest.resources.errors import (
    CheckpointRegressionError,
    CorruptStoreStateError,
    OwnershipLostError,
)
from dagster_eventhub_ingest.resources.store.records import (
    EPOCH_KEY,
    GENERATION_KEY,
    HUB_CREATED_KEY,
    INSTANCE_KEY,
    INTENT_END_KEY,
    INTENT_GENERATION_KEY,
    INTENT_LAYOUT_KEY,
    INTENT_OWNER_KEY,
    INTENT_START_KEY,
    LANDED_KEY,
    LEASE_MARGIN,
    OFFSET_KEY,
    OUR_KEYS,
    OWN_OFFSET_KEY,
    OWN_SEQ_KEY,
    OWNER_KEY,
    RESET_KEY,
    SEQ_KEY,
    BlobBackend,
    BlobRecord,
    Checkpoint,
    HubRef,
    Intent,
    Ownership,
    generation_of,
)

__all__ = ["Clock", "PartitionStore"]

logger = logging.getLogger(__name__)


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
            metadata = {k: v for k, v in current.items() if k in OUR_KEYS}
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
