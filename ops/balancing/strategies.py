"""The six balancing strategies, each a pure decision over a :class:`BalanceView`.

Every strategy only proposes claims; the cycle helper enforces the batch-run rule (never take a
partition a live peer has started reading) whatever a strategy returns. Sources:

- ``greedy`` / ``balanced``: azure-eventhub's ``EventProcessorClient`` load balancer.
- ``eph``: the legacy ``EventProcessorHost`` partition scanner.
- ``equal``: Cosmos DB change feed ``EqualPartitionsBalancingStrategy``.
- ``jump_hash``: Lamping and Veach's jump consistent hash, with RavenDB's re-hash on failure.
- ``delay_race``: the lease-grab race weighted by each contender's active partitions.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass

from dagster_eventhub_ingest.ops.balancing.base import BalanceView, BalancingStrategy, Claim
from dagster_eventhub_ingest.resources.config import DelayRaceOptions, check_strategy_options
from dagster_eventhub_ingest.resources.errors import ConfigurationError

__all__ = [
    "STRATEGIES",
    "Balanced",
    "DelayRace",
    "EqualPartitions",
    "EventProcessorHost",
    "Greedy",
    "JumpHash",
    "get_strategy",
    "jump_consistent_hash",
]

_MASK64 = (1 << 64) - 1


def _victim(view: BalanceView, rng: random.Random) -> str | None:
    """The most loaded other peer that has something stealable (ties: random, seeded)."""
    counts = view.counts()
    candidates = [o for o in view.peers if o != view.owner_id and view.stealable_from(o)]
    if not candidates:
        return None
    top = max(counts[o] for o in candidates)
    return rng.choice(sorted(o for o in candidates if counts[o] == top))


def _steal_one(view: BalanceView, rng: random.Random, victim: str) -> list[Claim]:
    return [Claim(rng.choice(view.stealable_from(victim)), "steal")]


class _ProcessorClient:
    """azure-eventhub's load balancer: fair share, claim free partitions, else steal one.

    Each owner's quota is the floor of ``P / N`` plus one for the first ``P mod N`` owners
    above the floor. Free partitions (unowned, expired, dead owner) are claimed up to the quota
    (``greedy``: all needed in one cycle; ``balanced``: one per cycle). Only when none is free
    does it steal one partition from the most loaded owner that holds more than its quota and
    at least two more than this owner (so a steal never just swaps the imbalance).
    """

    name = ""
    per_cycle: int | None = None

    def choose(self, view: BalanceView, rng: random.Random) -> list[Claim]:
        mine = len(view.mine())
        need = view.quota() - mine
        if need <= 0:
            return []
        free = view.free()
        if free:
            take = need if self.per_cycle is None else min(need, self.per_cycle)
            return [Claim(p) for p in view.preference(free, rng)[:take]]
        counts = view.counts()
        over = [
            o
            for o in view.peers
            if o != view.owner_id
            and counts[o] > view.quota(o)
            and counts[o] >= mine + 2
            and view.stealable_from(o)
        ]
        if not over:
            return []
        top = max(counts[o] for o in over)
        return _steal_one(view, rng, rng.choice(sorted(o for o in over if counts[o] == top)))


class Greedy(_ProcessorClient):
    """``greedy``: claim every free partition needed to reach the fair share in one cycle."""

    name = "greedy"
    per_cycle = None


class Balanced(_ProcessorClient):
    """``balanced``: claim at most one free partition per cycle (the SDK's default)."""

    name = "balanced"
    per_cycle = 1


class EventProcessorHost:
    """``eph``: legacy EventProcessorHost: free leases up to ceil(P/N), else steal one.

    Steals one partition from the biggest owner when it holds two or more than this owner,
    and only when there was nothing free to take this cycle.
    """

    name = "eph"

    def choose(self, view: BalanceView, rng: random.Random) -> list[Claim]:
        mine = len(view.mine())
        _, ceil = view.fair_share()
        free = view.free()
        if free:
            need = ceil - mine
            return [Claim(p) for p in view.preference(free, rng)[: max(0, need)]]
        victim = _victim(view, rng)
        if victim is not None and view.counts()[victim] >= mine + 2:
            return _steal_one(view, rng, victim)
        return []


class EqualPartitions:
    """``equal``: Cosmos DB change feed EqualPartitionsBalancingStrategy.

    Target is ceil(P/N). Takes every free (expired or unowned) lease it needs in one cycle;
    with none free, steals at most one per cycle from the most loaded owner when that owner
    holds more than ``target - (1 if needed > 1 else 0)``.
    """

    name = "equal"

    def choose(self, view: BalanceView, rng: random.Random) -> list[Claim]:
        _, target = view.fair_share()
        need = target - len(view.mine())
        if need <= 0:
            return []
        free = view.free()
        if free:
            return [Claim(p) for p in view.preference(free, rng)[:need]]
        victim = _victim(view, rng)
        if victim is not None and view.counts()[victim] > target - (1 if need > 1 else 0):
            return _steal_one(view, rng, victim)
        return []


def jump_consistent_hash(key: int, buckets: int) -> int:
    """Lamping and Veach's jump consistent hash: bucket in ``[0, buckets)`` for a 64-bit key."""
    if buckets <= 0:
        raise ValueError(f"buckets must be positive, got {buckets}")
    key &= _MASK64
    b, j = -1, 0
    while j < buckets:
        b = j
        key = (key * 2862933555777941757 + 1) & _MASK64
        j = int((b + 1) * (float(1 << 31) / float((key >> 33) + 1)))
    return b


def _key(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class JumpHash:
    """``jump_hash``: each partition belongs to one owner of the ring; zero contention, sticky.

    The ring is every known owner in join order (``BalanceView.ring``). If the hashed owner is
    not live, it is dropped and the partition hashed again (new key, new count), so a dead
    owner's partitions spread over the survivors instead of landing on one neighbour. An owner
    claims the free partitions that hash to it, and those held by a peer above ceil(P/N) that
    has not started them.
    """

    name = "jump_hash"

    @staticmethod
    def assign(partition_id: str, ring: list[str], live: set[str]) -> str:
        """The live owner ``partition_id`` hashes to."""
        candidates = list(ring)
        key = _key(partition_id)
        while candidates:
            owner = candidates[jump_consistent_hash(key, len(candidates))]
            if owner in live:
                return owner
            candidates.remove(owner)
            key = _key(f"{key}:{partition_id}")
        raise ValueError("no live owner to assign to")

    def choose(self, view: BalanceView, rng: random.Random) -> list[Claim]:
        live = set(view.peers)
        ring = list(view.ring) or list(view.peers)
        ring += [o for o in view.peers if o not in ring]
        counts = view.counts()
        _, ceil = view.fair_share()
        claims = []
        for p in view.partitions:
            if self.assign(p, ring, live) != view.owner_id:
                continue
            holder = view.holders.get(p)
            if holder is None:
                claims.append(Claim(p))
            elif holder != view.owner_id and p not in view.started and counts[holder] > ceil:
                # Hysteresis: only take from a holder above the fair share, so a partition
                # (above all a single one) does not hop to every newcomer it hashes to.
                claims.append(Claim(p, "steal"))
        return claims


_DELAY_RACE = DelayRaceOptions()


@dataclass(frozen=True)
class DelayRace:
    """``delay_race``: contenders race for each open lease mark; the less loaded waits less.

    A mark opens when it is free (unowned, released, older than the maximum lease time = the
    cycle's ``expiry``, or of a dead owner) or ``min_grab_time`` after its holder last wrote it
    (the winner's mark is cleared), unless the holder has started reading it. Each race starts
    when the mark opens: the holder re-grabs its own after ``(active - 0.5) * delay``, a
    contender claims after ``(active + i + 0.5) * delay`` for its i-th claim of the cycle (its
    active count by then). An owner looks ``lookahead`` seconds ahead (one polling interval)
    so all contenders race from the same opening instant. Each contender races for every free
    partition and for one mark of the most loaded peer per cycle. A holder that loses learns it
    at its next CAS, within one cycle: the maximum shutdown time. A holder paused past its
    mark's opening loses it to any contender: the failure the ``slow_owner`` scenario measures.
    """

    # Defaults and limits are DelayRaceOptions' (resources/config/, strategy_options).
    delay: float = _DELAY_RACE.delay
    min_grab_time: float = _DELAY_RACE.min_grab_time
    lookahead: float = _DELAY_RACE.lookahead
    name: str = "delay_race"

    def __post_init__(self) -> None:
        DelayRaceOptions.from_dict(
            {"delay": self.delay, "min_grab_time": self.min_grab_time, "lookahead": self.lookahead},
            where="delay_race",
        )

    def _opens_in(self, view: BalanceView, p: str) -> float | None:
        """Seconds until ``p``'s mark opens (0: open now), None if not within the lookahead."""
        if p in view.started:
            return None
        wait = max(self.min_grab_time - view.lease_age.get(p, 0.0), 0.0)
        return wait if wait <= self.lookahead else None

    def choose(self, view: BalanceView, rng: random.Random) -> list[Claim]:
        counts = view.counts()
        active = counts[view.owner_id]
        claims = []
        for p in view.mine():
            opens = self._opens_in(view, p)
            if opens is not None:
                claims.append(Claim(p, "keep", opens + max(active - 0.5, 0.0) * self.delay))
        free = view.free()
        contest = [(p, 0.0) for p in rng.sample(free, len(free))]
        marks = {
            o: [
                (p, w) for p in view.stealable_from(o) if (w := self._opens_in(view, p)) is not None
            ]
            for o in view.peers
            if o != view.owner_id
        }
        others = [o for o, opened in marks.items() if opened]
        if others:
            top = max(counts[o] for o in others)
            victim = rng.choice(sorted(o for o in others if counts[o] == top))
            contest.append(rng.choice(marks[victim]))
        for i, (p, opens) in enumerate(contest):
            reason = "free" if p not in view.holders else "steal"
            claims.append(Claim(p, reason, opens + (active + i + 0.5) * self.delay))
        return claims


STRATEGIES: dict[str, Callable[..., BalancingStrategy]] = {
    "greedy": Greedy,
    "balanced": Balanced,
    "eph": EventProcessorHost,
    "equal": EqualPartitions,
    "jump_hash": JumpHash,
    "delay_race": DelayRace,
}


def get_strategy(name: str, **options: object) -> BalancingStrategy:
    """The strategy registered as ``name`` (config key ``strategy``), built with ``options``.

    Raises:
        ConfigurationError: unknown name (the message lists the valid ones) or bad options.
    """
    factory = STRATEGIES.get(name)
    if factory is None:
        raise ConfigurationError(
            f"strategy={name!r} is not a balancing strategy; valid: {', '.join(STRATEGIES)}"
        )
    check_strategy_options(name, options)
    return factory(**options)
