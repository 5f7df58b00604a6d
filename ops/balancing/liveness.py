"""Owner liveness: heartbeat blobs judged on the store's clock, plus a pluggable death check.

Each owner writes ``{namespace}/{eventhub}/{consumer_group}/owners/{owner_id}`` (lower-cased,
next to the SDK's ``ownership/`` and ``checkpoint/`` folders, which the SDK never lists) once
per claim cycle. An owner holding zero partitions is thereby still counted as a peer when the
fair share is computed. The heartbeat carries ``ownerid`` (exact case) and ``ehijoined``, the
store-clock time of the owner's first heartbeat, which orders the ``jump_hash`` ring.

An owner is live when it is not known dead and either its heartbeat is younger than the expiry
or it holds an unexpired lease (an ``EventProcessorClient`` on the same consumer group writes no
heartbeat but is a peer). ``is_owner_dead`` lets the Dagster integration answer from run status
(a failed or canceled run is dead now), so takeover need not wait for lease expiry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from resources.errors import ConfigurationError
from resources.store import BlobRecord, PartitionStore

__all__ = ["DeathCheck", "Heartbeat", "delete_heartbeat", "list_heartbeats", "write_heartbeat"]

logger = logging.getLogger(__name__)

OWNERS_KIND = "owners"
OWNER_KEY = "ownerid"
JOINED_KEY = "ehijoined"

DeathCheck = Callable[[str], bool]
"""``is_owner_dead(owner_id) -> bool``: True only when the owner is certainly gone."""


@dataclass(frozen=True)
class Heartbeat:
    """One owner's heartbeat blob as last seen (``last_modified`` is on the store clock)."""

    owner_id: str
    etag: str
    last_modified: datetime
    joined: datetime

    def is_fresh(self, now: datetime, expiry: timedelta) -> bool:
        """True when the owner wrote its heartbeat within ``expiry`` of ``now``."""
        return now - self.last_modified < expiry


def _name(store: PartitionStore, owner_id: str) -> str:
    return store.hub.prefix(OWNERS_KIND) + owner_id.lower()


def _parse(record: BlobRecord) -> Heartbeat:
    joined = record.last_modified
    raw = record.metadata.get(JOINED_KEY)
    if raw:
        try:
            joined = datetime.fromisoformat(raw)
        except ValueError:
            # A hand-edited join time only reorders the jump_hash ring; not worth failing for.
            logger.warning("heartbeat %s: unparseable %s=%r ignored", record.name, JOINED_KEY, raw)
    owner = record.metadata.get(OWNER_KEY) or record.name.rsplit("/", 1)[-1]
    return Heartbeat(owner, record.etag, record.last_modified, joined)


def list_heartbeats(store: PartitionStore) -> dict[str, Heartbeat]:
    """Every owner's heartbeat for this hub and consumer group (one list call)."""
    return {
        hb.owner_id: hb for hb in map(_parse, store.backend.list(store.hub.prefix(OWNERS_KIND)))
    }


def write_heartbeat(
    store: PartitionStore, owner_id: str, previous: Heartbeat | None = None
) -> Heartbeat:
    """Record that ``owner_id`` is alive now (store clock); one conditional put when current.

    ``previous`` is this owner's heartbeat as last listed (its ETag makes the write a CAS and
    its join time is kept). A lost race (another process using the same owner id, or a stale
    ETag) is retried once from a fresh read: the heartbeat is a liveness hint, not a lease.
    """
    name = _name(store, owner_id)
    for _ in range(2):
        joined = previous.joined if previous is not None else store.now()
        metadata = {OWNER_KEY: owner_id, JOINED_KEY: joined.isoformat()}
        written = store.backend.put(
            name, metadata, etag=previous.etag if previous is not None else None
        )
        if written is not None:
            return _parse(written)
        record = store.backend.get(name)
        previous = None if record is None else _parse(record)
    raise ConfigurationError(
        f"hub={store.hub.describe()} owner={owner_id}: heartbeat blob {name!r} changes under "
        "every write: another process uses the same owner id. Give each run or CLI process a "
        "unique owner id."
    )


def delete_heartbeat(store: PartitionStore, owner_id: str) -> None:
    """Remove ``owner_id``'s heartbeat so peers stop counting it at once (graceful leave)."""
    store.backend.delete(_name(store, owner_id))
