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

One owner id, one process: every process also has an :class:`OwnerInstance` (host, pid
namespace, pid, orchestrator attempt, random nonce), written as ``ehiinstance`` on its heartbeat
and on every lease it claims. Before a run claims anything, :func:`take_owner_id` looks for
another instance of the same owner id: one known dead (its pid is gone on this host, or it is an
earlier attempt of a Dagster step) or silent for the whole expiry is taken over at once; one
running on this host, or seen writing, is alive and the run is refused
(:class:`~dagster_eventhub_ingest.resources.errors.DuplicateOwnerError`); one that may be either
(another machine) is watched until it writes (refused) or its expiry passes (taken over).
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from dagster_eventhub_ingest.ops.balancing.base import RunLog, log_line
from dagster_eventhub_ingest.resources.errors import ConfigurationError, DuplicateOwnerError
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.records import INSTANCE_KEY, BlobRecord

__all__ = [
    "DeathCheck",
    "Heartbeat",
    "OwnerInstance",
    "delete_heartbeat",
    "list_heartbeats",
    "take_owner_id",
    "write_heartbeat",
]

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
    instance: str = ""  # the OwnerInstance token of the process that wrote it ("" if unknown)

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
    return Heartbeat(
        owner, record.etag, record.last_modified, joined, record.metadata.get(INSTANCE_KEY, "")
    )


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
    its join time is kept). A lost race (a stale ETag) is retried from a fresh read: the
    heartbeat is a liveness hint, not a lease. When the store has an instance token and the
    heartbeat now carries another one, another process took this owner id over (it judged this
    one dead): :class:`DuplicateOwnerError`, this process must stop.
    """
    name = _name(store, owner_id)
    mine = store.instance or ""
    for _ in range(3):
        if previous is not None and mine and previous.instance and previous.instance != mine:
            raise DuplicateOwnerError(
                f"hub={store.hub.describe()} owner={owner_id}: another process "
                f"({OwnerInstance.describe_token(previous.instance)}) took this owner id over "
                "(it found this one silent for the whole lease expiry); this run stops. Its "
                "batches are fenced: the other process replays them. Give each process its own "
                "owner id."
            )
        joined = previous.joined if previous is not None else store.now()
        metadata = {OWNER_KEY: owner_id, JOINED_KEY: joined.isoformat()}
        if mine:
            metadata[INSTANCE_KEY] = mine
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
    """Remove ``owner_id``'s heartbeat so peers stop counting it at once (graceful leave).

    With an instance token, only this process's own heartbeat: a process that took the owner
    id over keeps its own.
    """
    name = _name(store, owner_id)
    if not store.instance:
        store.backend.delete(name)
        return
    record = store.backend.get(name)
    if record is not None and record.metadata.get(INSTANCE_KEY, "") in ("", store.instance):
        store.backend.delete(name, etag=record.etag)


# Instances running in this process right now (their nonces): another instance with this
# process's pid is dead unless it is listed here.
_RUNNING: set[str] = set()
_RUNNING_LOCK = threading.Lock()
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def _pid_namespace() -> str:
    """This process's pid namespace (containers on one host each have their own), or ""."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists (another user's), or unsure: alive
    return True


@dataclass(frozen=True)
class OwnerInstance:
    """One process running as an owner id, told apart from any other with the same id.

    ``attempt``: the orchestrator's attempt number when it guarantees that attempt N starts only
    after attempt N-1 ended (a Dagster step retry, which keeps the run id as owner id): an
    instance with a lower attempt is then dead. The token is ASCII (blob metadata).
    """

    host: str
    pidns: str
    pid: int
    nonce: str
    attempt: int | None = None

    @classmethod
    def current(cls, attempt: int | None = None) -> OwnerInstance:
        """A new instance for this process (a fresh nonce); call :meth:`start` when running."""
        host = _UNSAFE.sub("_", socket.gethostname())[:63] or "host"
        return cls(host, _pid_namespace(), os.getpid(), uuid.uuid4().hex[:12], attempt)

    def token(self) -> str:
        """The value of the ``ehiinstance`` metadata key."""
        attempt = "" if self.attempt is None else str(self.attempt)
        return f"{self.host}/{self.pidns}/{self.pid}/{attempt}/{self.nonce}"

    @classmethod
    def parse(cls, token: str) -> OwnerInstance | None:
        """The instance a token names, or None for a token not written by this class."""
        parts = token.split("/")
        if len(parts) != 5 or not parts[2].isdigit():
            return None
        host, pidns, pid, attempt, nonce = parts
        return cls(host, pidns, int(pid), nonce, int(attempt) if attempt.isdigit() else None)

    @staticmethod
    def describe_token(token: str) -> str:
        """A human description of the process a token names (for errors)."""
        inst = OwnerInstance.parse(token) if token else None
        if inst is None:
            return "a process of an earlier version" if not token else f"instance {token}"
        attempt = "" if inst.attempt is None else f", attempt {inst.attempt}"
        return f"pid {inst.pid} on host {inst.host}{attempt}"

    def start(self) -> None:
        """Mark this instance running in this process (see :meth:`judge`)."""
        with _RUNNING_LOCK:
            _RUNNING.add(self.nonce)

    def stop(self) -> None:
        """Mark this instance ended."""
        with _RUNNING_LOCK:
            _RUNNING.discard(self.nonce)

    def judge(self, token: str) -> str:
        """What this process can tell of the instance ``token`` names, never a guess.

        ``"dead"``: certainly ended (an earlier attempt; its pid is gone on this host; an
        ended run of this very process). ``"alive"``: its process runs on this host (a
        recycled pid would look alive: the silence rule of :func:`take_owner_id` still ends
        that). ``"unknown"``: another machine or container, or a token of an earlier version.
        """
        other = OwnerInstance.parse(token)
        if other is None or other.nonce == self.nonce:
            return "unknown"
        if other.attempt is not None and self.attempt is not None and other.attempt < self.attempt:
            return "dead"  # the orchestrator started this attempt after that one ended
        if other.host != self.host or other.pidns != self.pidns or not self.pidns:
            return "unknown"  # another machine or container: only its silence tells
        if other.pid == self.pid:
            with _RUNNING_LOCK:
                return "alive" if other.nonce in _RUNNING else "dead"
        return "alive" if _pid_alive(other.pid) else "dead"


def take_owner_id(
    store: PartitionStore,
    owner_id: str,
    me: OwnerInstance,
    *,
    expiry: timedelta,
    poll_seconds: float = 0.5,
    sleep: Callable[[float], None] = time.sleep,
    run_log: RunLog | None = None,
) -> Heartbeat:
    """Make this process the only live one running as ``owner_id``; before any claim.

    Looks at the owner's heartbeat and the leases held under ``owner_id``. Any written by
    another instance of the same owner id is judged: silent for ``expiry`` (store clock) or
    known dead (:meth:`OwnerInstance.judge`) is taken over at once (its leases are released,
    keeping their intents, so the claim cycle replays them); known alive, or seen writing
    while watched: :class:`DuplicateOwnerError`, nothing claimed or read. Unsure: watch
    every ``poll_seconds`` until one of the two, so the wait is bounded by ``expiry``. Then the
    heartbeat is written with this instance (CAS: of two processes starting at once, one wins,
    the other sees it alive). ``store.instance`` must be ``me.token()``. The watching and
    takeover lines also go to ``run_log`` when given (the run's own log).
    """
    mine = me.token()
    name = _name(store, owner_id)
    first_seen: dict[str, str] = {}  # blob -> ETag when first seen with another instance
    announced = False
    while True:
        now = store.now()
        record = store.backend.get(name)
        heartbeat = None if record is None else _parse(record)
        others: dict[str, list[tuple[str, str, datetime]]] = {}
        if heartbeat is not None and heartbeat.instance != mine:
            others.setdefault(heartbeat.instance, []).append(
                (name, heartbeat.etag, heartbeat.last_modified)
            )
        leases = [
            o
            for o in store.list_ownership().values()
            if o.owner_id == owner_id and o.instance != mine
        ]
        for own in leases:
            others.setdefault(own.instance, []).append(
                (f"ownership/{own.partition_id}", own.etag, own.last_modified)
            )
        unsure: list[tuple[str, float]] = []
        for token, blobs in others.items():
            last = max(when for _, _, when in blobs)
            silent = (now - last).total_seconds()
            verdict = "dead" if silent >= expiry.total_seconds() else me.judge(token)
            if verdict == "alive" or any(
                first_seen.get(blob, etag) != etag for blob, etag, _ in blobs
            ):
                raise DuplicateOwnerError(
                    f"hub={store.hub.describe()}: owner id {owner_id!r} is in use by another "
                    f"live process ({OwnerInstance.describe_token(token)}, last wrote "
                    f"{silent:.1f} s ago). Two processes with one owner id would read and commit "
                    "the same batches, so this one claimed and read nothing. Give each process "
                    "its own owner id (leave `--owner` unset for a unique one), or wait until "
                    "the other one ends. If it was killed, a run with this owner id takes over "
                    f"once it has been silent for lease_expiry_seconds "
                    f"({expiry.total_seconds():g} s)."
                )
            for blob, etag, _ in blobs:
                first_seen.setdefault(blob, etag)
            if verdict == "unknown":
                unsure.append((token, expiry.total_seconds() - silent))
        if unsure:
            if not announced:
                token, left = unsure[0]
                log_line(
                    logger,
                    run_log,
                    logging.WARNING,
                    f"hub={store.hub.describe()} owner={owner_id}: another process with this "
                    f"owner id ({OwnerInstance.describe_token(token)}) wrote to the store "
                    f"recently; watching it for up to {left:.0f} s: if it writes it is alive "
                    "and this run stops, otherwise this run takes over",
                )
                announced = True
            sleep(min(poll_seconds, max(left for _, left in unsure)))
            continue
        metadata = {OWNER_KEY: owner_id, JOINED_KEY: now.isoformat(), INSTANCE_KEY: mine}
        written = store.backend.put(
            name, metadata, etag=heartbeat.etag if heartbeat is not None else None
        )
        if written is None:
            continue  # another process wrote it meanwhile: judge it
        for own in leases:
            pending = own.intent
            log_line(
                logger,
                run_log,
                logging.WARNING,
                f"hub={store.hub.describe()} partition={own.partition_id} owner={owner_id}: "
                "taking over from an ended process with this owner id "
                f"({OwnerInstance.describe_token(own.instance)})"
                + (
                    f"; its pending range [{pending.start}, {pending.end}] is replayed"
                    if pending is not None
                    else ""
                ),
            )
            store.release(own)  # its intent stays: whoever claims it next replays it
        return _parse(written)
