"""The balancing interface: a pure decision over a snapshot of the partition store.

A strategy never touches the store. The claim-cycle helper
(``dagster_eventhub_ingest.ops.balancing.cycle``) lists the store once, builds a
:class:`BalanceView`, asks the strategy for :class:`Claim` s, applies the batch-run rule and
performs the compare-and-set claims. Keeping the decision pure makes every strategy
property-testable without I/O and lets the simulator run the exact same code.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

__all__ = ["BalanceView", "BalancingStrategy", "Claim", "RunLog", "log_line"]


class RunLog(Protocol):
    """Where the lines a run's user watches also go: Dagster's ``context.log`` inside an asset,
    an Airflow task's logger; balancing never imports either, the run passes one in."""

    def info(self, msg: str) -> None: ...

    def warning(self, msg: str) -> None: ...


def log_line(logger: logging.Logger, run_log: RunLog | None, level: int, msg: str) -> None:
    """``msg`` to this module's ``logger`` and, when given, to ``run_log`` at the same level.

    A failing ``run_log`` never stops a claim or a takeover: the line is in ``logger`` anyway.
    """
    logger.log(level, msg, stacklevel=2)  # the record names the caller, not this helper
    if run_log is None:
        return
    try:
        (run_log.warning if level >= logging.WARNING else run_log.info)(msg)
    except Exception:
        logger.debug("run log failed", exc_info=True)


@dataclass(frozen=True)
class Claim:
    """One partition a strategy wants this owner to hold, after waiting ``delay`` seconds.

    ``reason`` is ``"free"`` (unowned, released, expired, or held by an owner known dead),
    ``"steal"`` (held by a live peer that has not started reading it) or ``"keep"`` (this
    owner re-races for a partition it already holds; only ``delay_race`` does that).
    """

    partition_id: str
    reason: str = "free"
    delay: float = 0.0


@dataclass(frozen=True)
class BalanceView:
    """What one owner sees in one cycle; everything a strategy may base a decision on.

    Attributes:
        owner_id: the owner deciding.
        partitions: the target partition ids, sorted.
        peers: live owners (heartbeat fresh, or holding an unexpired lease, and not known dead),
            sorted; always includes ``owner_id``.
        holders: partition -> live holder. Partitions absent here are free to take. A partition
            whose lease this owner holds is listed even when it expired (this owner renews it).
        started: partitions whose live holder has recorded its own intent (it is reading them);
            the batch-run rule forbids taking these from a live peer.
        lease_age: seconds since each held partition's lease was last written (store clock).
        ring: every owner known this cycle, live peers and departed ones still named on a
            target partition's blob, in join order (first heartbeat on the store clock, then
            id). ``jump_hash`` hashes over it: joiners append at the end, so a scale-out moves
            only the partitions the newcomer takes, and a departed owner's partitions re-hash
            over the survivors.
    """

    owner_id: str
    partitions: tuple[str, ...]
    peers: tuple[str, ...]
    holders: Mapping[str, str] = field(default_factory=dict)
    started: frozenset[str] = frozenset()
    lease_age: Mapping[str, float] = field(default_factory=dict)
    ring: tuple[str, ...] = ()

    # -- derived facts every strategy needs ----------------------------------------------------
    def counts(self) -> Counter[str]:
        """Partitions held per live peer (peers holding none are present with 0)."""
        result: Counter[str] = Counter({p: 0 for p in self.peers})
        result.update(self.holders.values())
        return result

    def mine(self) -> list[str]:
        """Partitions this owner holds, sorted."""
        return [p for p in self.partitions if self.holders.get(p) == self.owner_id]

    def free(self) -> list[str]:
        """Partitions nobody live holds: unowned, released, expired or of a dead owner."""
        return [p for p in self.partitions if p not in self.holders]

    def stealable_from(self, owner: str) -> list[str]:
        """Partitions ``owner`` holds but has not started reading (the only ones one may take)."""
        return [
            p for p in self.partitions if self.holders.get(p) == owner and p not in self.started
        ]

    def preference(self, candidates: list[str], rng: random.Random) -> list[str]:
        """``candidates`` ordered for claiming: this owner's round-robin slots first.

        The designs pick free partitions at random; owners that start together then collide
        on the same blobs. Every peer computes the same round-robin split of the sorted
        targets over the sorted peers, so each tries "its" partitions first and a simultaneous
        start is settled in one claim phase. The rest follow in random (seeded) order.
        """
        n = max(len(self.peers), 1)
        index = {p: i for i, p in enumerate(self.partitions)}
        me = self.peers.index(self.owner_id) if self.owner_id in self.peers else -1
        own = sorted((p for p in candidates if index.get(p, -1) % n == me), key=lambda p: index[p])
        taken = set(own)
        rest = [p for p in candidates if p not in taken]
        return own + rng.sample(rest, len(rest))

    def fair_share(self) -> tuple[int, int]:
        """``(floor, ceil)`` of partitions per live owner."""
        n = max(len(self.peers), 1)
        floor = len(self.partitions) // n
        return floor, floor + (1 if len(self.partitions) % n else 0)

    def quota(self, owner: str | None = None) -> int:
        """How many partitions ``owner`` (default: this owner) should hold for a fair split.

        Everybody gets the floor; the ``P mod N`` owners that already hold more than the floor
        keep one extra, and the remaining extra slots go to whoever asks first.
        """
        owner = owner or self.owner_id
        floor, ceil = self.fair_share()
        extra = len(self.partitions) % max(len(self.peers), 1)
        if not extra:
            return floor
        counts = self.counts()
        if counts[owner] > floor:
            # Already above the floor: keep one extra unless too many others hold extras too
            # (ties broken by owner id so every peer computes the same answer).
            above = sorted(
                (o for o, c in counts.items() if c > floor), key=lambda o: (-counts[o], o)
            )
            return ceil if above.index(owner) < extra else floor
        others_above = sum(1 for o, c in counts.items() if o != owner and c > floor)
        return ceil if others_above < extra else floor


@runtime_checkable
class BalancingStrategy(Protocol):
    """Decides, from one :class:`BalanceView`, which partitions its owner should claim."""

    @property
    def name(self) -> str:
        """The registry name (config key ``strategy``)."""
        ...

    def choose(self, view: BalanceView, rng: random.Random) -> list[Claim]:
        """The claims to attempt this cycle; ``rng`` breaks ties (seeded in the simulator).

        Must be pure: no I/O, no clock, no global randomness. Returning a partition in
        ``view.started`` held by another owner is a bug; the cycle helper drops such claims.
        """
        ...
