"""Keep this run's leases alive while Spark reads: one renewer thread, one lock, fenced updates.

Every store operation on a held partition (intent, checkpoint, release, renew) goes through
:meth:`LeaseKeeper.apply`, so the renewer and the run never race each other on the ETag; each
successful call replaces the remembered :class:`Ownership` with the one the store returned.
Expiry is judged by peers on the store's clock (Last-Modified); the local timer only paces
renewals, at a third of the expiry so two missed renewals still leave the lease valid.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from dagster_eventhub_ingest.resources.errors import (
    EventHubIngestError,
    OwnershipLostError,
    StoreUnavailableError,
    redact,
)
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.records import Ownership

__all__ = ["LeaseKeeper"]

logger = logging.getLogger(__name__)


class LeaseKeeper:
    """Hold, renew and update this owner's leases.

    Args:
        store: the partition store.
        owner_id: this run's owner id (for log lines).
        interval: seconds between renewals (a third of the lease expiry is a good value).
        on_tick: called on every renewal tick (e.g. an owner heartbeat); errors are logged.
        warn: also receives every warning line (e.g. Dagster's ``context.log.warning``, so lost
            leases and failed renewals show in the run's event log).
    """

    def __init__(
        self,
        store: PartitionStore,
        owner_id: str,
        interval: float,
        on_tick: Callable[[], None] | None = None,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.owner_id = owner_id
        self.interval = interval
        self.on_tick = on_tick
        self._warn = warn
        self._held: dict[str, Ownership] = {}
        # When (time.monotonic) each held lease was last proven by a store write: the write
        # was sent then, so the store stamped it no earlier and peers wait an expiry from there.
        self._proven: dict[str, float] = {}
        self.lost: set[str] = set()
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> LeaseKeeper:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start the renewer thread (daemon: a killed process leaves leases to expire)."""
        self._thread = threading.Thread(
            target=self._loop, name=f"lease-renewer-{self.owner_id}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing (does not release; call :meth:`release_all` first)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.interval + 5)

    @property
    def held(self) -> dict[str, Ownership]:
        """A copy of the leases held right now."""
        with self._lock:
            return dict(self._held)

    def hold(self, ownerships: Iterable[Ownership]) -> None:
        """Start renewing these (just claimed) leases."""
        with self._lock:
            for own in ownerships:
                self._held[own.partition_id] = own
                self._proven.pop(own.partition_id, None)  # proven by the next write
                self.lost.discard(own.partition_id)

    def apply(self, partition_id: str, op: Callable[[Ownership], Ownership]) -> Ownership:
        """Run a fenced store operation on a held lease and remember its result.

        Raises :class:`OwnershipLostError` (and forgets the lease) if another owner took it.
        """
        with self._lock:
            own = self._held.get(partition_id)
            if own is None:
                raise OwnershipLostError(
                    f"owner {self.owner_id!r} no longer holds partition {partition_id} of hub "
                    f"{self.store.hub.describe()}"
                )
            sent = time.monotonic()
            try:
                updated = op(own)
            except OwnershipLostError:
                self._forget(partition_id)
                raise
            self._held[partition_id] = updated
            self._proven[partition_id] = sent
            return updated

    def confirm(self, partition_ids: Iterable[str], within: float) -> set[str]:
        """The leases among ``partition_ids`` this run still holds, each proven by a store write
        less than ``within`` seconds ago (renewed now if older): the fence before a sink write.

        A lease found lost (now, or earlier by the renewer) is left out: its partition is not
        written in this run any more, since a peer may be writing the same batch. A store that
        cannot be reached raises :class:`StoreUnavailableError`: nothing can be proven.
        """
        held: set[str] = set()
        for pid in partition_ids:
            with self._lock:
                fresh = (
                    pid in self._held
                    and time.monotonic() - self._proven.get(pid, float("-inf")) < within
                )
            if fresh:
                held.add(pid)
                continue
            try:
                self.apply(pid, self.store.renew)
            except OwnershipLostError:
                continue
            held.add(pid)
        return held

    def _forget(self, partition_id: str) -> None:
        self._held.pop(partition_id, None)
        self._proven.pop(partition_id, None)
        self.lost.add(partition_id)
        self._warning(
            f"lease lost hub={self.store.hub.describe()} partition={partition_id} "
            f"owner={self.owner_id}: another owner took it; this run drops the partition"
        )

    def _warning(self, msg: str, exc_info: bool = False) -> None:
        # One line by default; the traceback only with -v (INFO) or more.
        logger.warning(msg, exc_info=exc_info and logger.isEnabledFor(logging.INFO))
        if self._warn is not None:
            try:
                self._warn(msg)
            except Exception:  # a log sink failing must not stop lease renewal
                logger.debug("warn callback failed", exc_info=True)

    def release(self, partition_id: str) -> None:
        """Give one lease up (a lost race here is fine: someone else has it)."""
        with self._lock:
            own = self._held.pop(partition_id, None)
            self._proven.pop(partition_id, None)
            if own is not None:
                try:
                    self.store.release(own)
                except StoreUnavailableError:
                    raise
                except EventHubIngestError as exc:
                    self._warning(
                        f"release failed hub={self.store.hub.describe()} "
                        f"partition={partition_id} owner={self.owner_id}; it will expire: {exc}",
                        exc_info=True,
                    )

    def release_all(self, *, leaving: bool = False) -> None:
        """Give every held lease up; when the store is down, stop at the first failure.

        Each store call already retries for a few seconds: trying every partition would cost
        that many times over (minutes at 16 partitions) for leases that expire anyway, so the
        time is bounded by one call's retries whatever the partition count. ``leaving``: the
        run is ending, so the renewer stops first and never holds the lock meanwhile.
        """
        if leaving:
            self._stop.set()
        held = list(self.held)
        for i, pid in enumerate(held):
            try:
                self.release(pid)
            except StoreUnavailableError as exc:
                with self._lock:
                    for rest in held[i + 1 :]:
                        self._held.pop(rest, None)
                        self._proven.pop(rest, None)
                self._warning(
                    f"store unavailable hub={self.store.hub.describe()} owner={self.owner_id}: "
                    f"{len(held) - i} lease(s) not released, they expire after "
                    f"lease_expiry_seconds: {exc}",
                    exc_info=True,
                )
                return

    def renew_all(self) -> None:
        """Renew every held lease once (the renewer thread calls this).

        Stops early when the keeper is stopping, or at the first store outage (next tick).
        """
        for pid in list(self.held):
            if self._stop.is_set():
                return
            try:
                self.apply(pid, self.store.renew)
            except OwnershipLostError:
                pass  # already logged and forgotten; the run drops the partition
            except StoreUnavailableError as exc:
                self._warning(
                    f"renew failed hub={self.store.hub.describe()} owner={self.owner_id}: {exc}; "
                    "retrying at the next tick",
                    exc_info=True,
                )
                return
            except Exception as exc:
                # A transient store error: keep the lease and retry next tick; it only expires
                # if renewals keep failing for the whole expiry.
                self._warning(
                    f"renew failed hub={self.store.hub.describe()} partition={pid} "
                    f"owner={self.owner_id}: {type(exc).__name__}: {redact(str(exc))[:300]}; "
                    "retrying at the next tick",
                    exc_info=True,
                )

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.renew_all()
            if self.on_tick is not None:
                try:
                    self.on_tick()
                except Exception as exc:
                    # Peers judge liveness by it: a long outage makes this run look gone.
                    self._warning(
                        f"owner heartbeat failed hub={self.store.hub.describe()} "
                        f"partitions={sorted(self.held)} owner={self.owner_id}: "
                        f"{type(exc).__name__}: {redact(str(exc))[:300]}; retrying at the next "
                        "tick",
                        exc_info=True,
                    )
