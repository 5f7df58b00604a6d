"""Deterministic simulator comparing balancing strategies on the same scenarios.

Owners run the real claim-cycle code (:mod:`dagster_eventhub_ingest.ops.balancing.cycle`) against
the in-memory store (same CAS semantics as Blob Storage) on a simulated clock. A discrete-event loop
interleaves them between storage calls: each call takes the owner's own latency (seeded), claims
wait the strategy's delays, pauses freeze an owner, a crash stops it without releasing. Between
cycles owners "read": every partition held since the previous cycle gets a write-ahead intent, stays
started for ``read_time`` seconds, then a fenced checkpoint clears the intent. Same seed, same
numbers.

Metrics per run (see :class:`SimResult`):

- ``time_to_balanced``: seconds after the last disturbance (last join, leave, crash) until
  every partition is held by a live owner with max - min <= 1 among live owners, for good
  (``None``: not balanced when the run ended).
- ``time_to_stable``: same, for "every partition held and nobody's holdings change again".
- ``moves``: claims that took a partition whose last holder was another owner.
- ``cas_conflicts`` / ``storage_ops``: lost conditional writes and storage calls made by the
  balancing code (plan, claims, renewals, heartbeats, leave); reads' calls are not counted.
- ``unowned_partition_seconds``: integral over time of partitions without a live holder.
- ``double_owner_moments``: times an owner took or started reading a partition while another
  live owner was reading it on a lease still valid by the store clock. Must always be 0.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import json
import math
import random
from collections import Counter
from collections.abc import Callable, Generator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from dagster_eventhub_ingest.ops.balancing import (
    BalancingStrategy,
    CyclePlan,
    execute_claim,
    finish_cycle,
    get_strategy,
    join,
    leave,
    plan_claims,
)
from dagster_eventhub_ingest.resources.errors import ConfigurationError, OwnershipLostError
from dagster_eventhub_ingest.resources.store.memory import InMemoryBackend
from dagster_eventhub_ingest.resources.store.partition_store import OWNER_KEY, PartitionStore
from dagster_eventhub_ingest.resources.store.records import BlobRecord, HubRef, Ownership

__all__ = ["SCENARIOS", "SimConfig", "SimResult", "Simulation", "simulate"]

SCENARIOS = (
    "scale_out",
    "scale_out_staggered",
    "scale_in",
    "crash",
    "slow_owner",
    "single_partition",
)
EPOCH = datetime(2030, 1, 1, tzinfo=timezone.utc)
HUB = HubRef("sim.servicebus.windows.net", "hub", "$default")

Planner = Callable[..., CyclePlan]


@dataclass(frozen=True)
class SimConfig:
    """One simulated run: strategy, sizes, scenario, seed and the timing model (seconds)."""

    strategy: str
    partitions: int
    owners: int
    scenario: str
    seed: int = 0
    interval: float = 10.0
    expiry: float = 30.0
    latency: tuple[float, float] = (0.002, 0.020)
    read_time: float = 2.0
    join_grace: float = 1.0
    jitter: float = 0.1
    dead_detection: float | None = None
    strategy_options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIOS:
            raise ConfigurationError(
                f"scenario={self.scenario!r} is unknown; valid: {', '.join(SCENARIOS)}"
            )
        if self.partitions < 1:
            raise ConfigurationError(f"partitions={self.partitions}: must be >= 1")
        if self.owners < 1:
            raise ConfigurationError(f"owners={self.owners}: must be >= 1")
        if not 0 < self.interval < self.expiry:
            raise ConfigurationError(
                f"interval={self.interval}, expiry={self.expiry}: need 0 < interval < expiry"
            )
        get_strategy(self.strategy, **dict(self.strategy_options))  # fail early on bad names
        if not 0 <= self.jitter < 1:
            raise ConfigurationError(f"jitter={self.jitter}: must be in [0, 1)")


@dataclass
class SimResult:
    """The metrics of one run (see the module docstring)."""

    strategy: str
    scenario: str
    partitions: int
    owners: int
    seed: int
    time_to_balanced: float | None
    time_to_stable: float | None
    moves: int
    cas_conflicts: int
    storage_ops: int
    unowned_partition_seconds: float
    double_owner_moments: int
    fenced_writes: int
    simulated_seconds: float
    final_counts: dict[str, int]

    def to_json(self) -> str:
        """The result as one JSON object."""
        return json.dumps(asdict(self), sort_keys=True)


class _TruthBackend(InMemoryBackend):
    """The in-memory backend plus a cheap mirror of who holds what (for metrics only)."""

    def __init__(self, clock: Callable[[], datetime], prefix: str) -> None:
        super().__init__(clock)
        self._prefix = prefix
        self.holder: dict[str, tuple[str, datetime]] = {}
        self.last_holder: dict[str, str] = {}
        self.moves = 0

    def put(
        self,
        name: str,
        metadata: Mapping[str, str],
        *,
        etag: str | None,
        deadline: datetime | None = None,
    ) -> BlobRecord | None:
        record = super().put(name, metadata, etag=etag)
        if record is not None and name.startswith(self._prefix):
            pid = name[len(self._prefix) :]
            owner = metadata.get(OWNER_KEY, "")
            self.holder[pid] = (owner, record.last_modified)
            if owner:
                previous = self.last_holder.get(pid)
                if previous is not None and previous != owner:
                    self.moves += 1
                self.last_holder[pid] = owner
        return record


@dataclass
class _Owner:
    owner_id: str
    latency: float
    join_at: float
    rng: random.Random
    leave_at: float | None = None
    crash_at: float | None = None
    pauses: list[tuple[float, float]] = field(default_factory=list)
    alive: bool = False
    gone: bool = False
    held: dict[str, Ownership] = field(default_factory=dict)
    settled: set[str] = field(default_factory=set)
    reading: dict[str, Ownership] = field(default_factory=dict)

    def resume_time(self, at: float) -> float:
        """``at`` pushed past any pause covering it (a paused process does nothing)."""
        for start, end in self.pauses:
            if start <= at < end:
                at = end
        return at


class Simulation:
    """One deterministic run of a scenario; :meth:`run` returns the :class:`SimResult`.

    ``planner`` defaults to :func:`dagster_eventhub_ingest.ops.balancing.plan_claims`; tests replace
    it to prove the metrics catch a broken batch-run rule.
    """

    def __init__(self, config: SimConfig, planner: Planner = plan_claims) -> None:
        self.config = config
        self.planner = planner
        self.partitions = 1 if config.scenario == "single_partition" else config.partitions
        self.targets = [str(i) for i in range(self.partitions)]
        self.t = 0.0
        self.backend = _TruthBackend(self._clock, HUB.prefix("ownership"))
        self.store = PartitionStore(self.backend, HUB)
        self.strategy: BalancingStrategy = get_strategy(
            config.strategy, **dict(config.strategy_options)
        )
        self.expiry = timedelta(seconds=config.expiry)
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.balancing_ops = 0
        self.balancing_conflicts = 0
        self.double_owner_moments = 0
        self.fenced_writes = 0
        self.owners: list[_Owner] = []
        self.disturbance = 0.0
        self.horizon = 0.0
        self._build_scenario()
        # (time, balanced, state signature, unowned count)
        self._samples: list[tuple[float, bool, tuple[str, ...] | None, int]] = []

    # -- clock and scheduling ------------------------------------------------------------------
    def _clock(self) -> datetime:
        return EPOCH + timedelta(seconds=self.t)

    def _at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._queue, (when, next(self._seq), action))

    def _spawn(self, owner: _Owner, gen: Generator[float, None, None]) -> None:
        def step() -> None:
            if owner.gone:
                return
            try:
                wanted = next(gen)
            except StopIteration:
                return
            self._at(owner.resume_time(max(wanted, self.t)), step)

        step()

    # -- scenario ------------------------------------------------------------------------------
    def _build_scenario(self) -> None:
        c = self.config
        rng = random.Random(c.seed)
        interval = c.interval
        staggered = c.scenario in ("scale_out_staggered", "single_partition")
        for i in range(c.owners):
            low, high = c.latency
            self.owners.append(
                _Owner(
                    owner_id=f"owner-{i:02d}",
                    latency=rng.uniform(low, high),
                    join_at=(i * interval / 2) if staggered else rng.uniform(0, 0.01),
                    rng=random.Random(rng.getrandbits(64)),
                )
            )
        event = 6 * interval
        if staggered:
            self.disturbance = self.owners[-1].join_at
        elif c.scenario == "scale_in":
            for owner in self.owners[: c.owners // 2]:
                owner.leave_at = event
            self.disturbance = event
        elif c.scenario == "crash":
            self.owners[0].crash_at = event
            if c.owners == 1:
                self.owners.append(
                    _Owner("owner-replacement", self.owners[0].latency, event, random.Random(7))
                )
            self.disturbance = event
        elif c.scenario == "slow_owner":
            # Pauses longer than the renew interval but shorter than the lease expiry.
            pause = 1.5 * interval
            self.owners[0].pauses = [
                (event + k * 4 * interval, event + k * 4 * interval + pause) for k in range(3)
            ]
            self.disturbance = 0.0
            self.horizon = self.owners[0].pauses[-1][1]
        self.horizon = max(self.horizon, self.disturbance) + 10 * interval
        per_owner = math.ceil(self.partitions / max(1, c.owners))
        # balanced claims one partition per cycle: give it room to finish, then stop.
        self.cap = self.horizon + (per_owner + 20) * interval
        for owner in self.owners:
            self._at(owner.join_at, functools.partial(self._join, owner))
            if owner.crash_at is not None:
                self._at(owner.crash_at, functools.partial(self._crash, owner))
            if owner.leave_at is not None:
                self._at(owner.leave_at, functools.partial(self._leave, owner))

    # -- owner behaviour -----------------------------------------------------------------------
    def _dead(self, owner_id: str) -> bool:
        d = self.config.dead_detection
        for o in self.owners:
            if o.owner_id == owner_id and o.crash_at is not None and d is not None:
                return self.t >= o.crash_at + d
        return False

    def _join(self, owner: _Owner) -> None:
        owner.alive = True
        before = (self.backend.operations, self.backend.conflicts)
        join(self.store, owner.owner_id)
        self._count(before)
        self._at(self.t + self.config.join_grace, lambda: self._spawn(owner, self._cycles(owner)))

    def _crash(self, owner: _Owner) -> None:
        owner.alive = False
        owner.gone = True
        owner.reading.clear()
        self._sample()

    def _leave(self, owner: _Owner) -> None:
        before = (self.backend.operations, self.backend.conflicts)
        leave(self.store, owner.owner_id, owner.held)
        self._count(before)
        owner.alive = False
        owner.gone = True
        owner.reading.clear()
        self._sample()

    def _count(self, before: tuple[int, int]) -> None:
        self.balancing_ops += self.backend.operations - before[0]
        self.balancing_conflicts += self.backend.conflicts - before[1]

    def _valid_reader(self, other: _Owner, p: str) -> bool:
        own = other.reading.get(p)
        return own is not None and other.alive and self._clock() - own.last_modified < self.expiry

    def _check_double(self, owner: _Owner, p: str) -> None:
        for other in self.owners:
            if other is not owner and self._valid_reader(other, p):
                self.double_owner_moments += 1

    def _cycles(self, owner: _Owner) -> Generator[float, None, None]:
        interval, lat = self.config.interval, owner.latency
        while owner.alive:
            start = self.t
            before = (self.backend.operations, self.backend.conflicts)
            plan = self.planner(
                self.store,
                owner.owner_id,
                self.strategy,
                targets=self.targets,
                expiry=self.expiry,
                is_owner_dead=self._dead,
                rng=owner.rng,
            )
            self._count(before)
            yield self.t + 3 * lat
            won: dict[str, Ownership] = {}
            t0 = self.t
            for claim in sorted(plan.claims, key=lambda c: c.delay):
                if t0 + claim.delay > self.t:
                    yield t0 + claim.delay
                if not owner.alive:
                    return
                before = (self.backend.operations, self.backend.conflicts)
                got = execute_claim(self.store, plan, claim)
                self._count(before)
                if got is not None:
                    self._check_double(owner, claim.partition_id)
                    won[claim.partition_id] = got
                self._sample()
                yield self.t + lat
            if not owner.alive:
                return
            before = (self.backend.operations, self.backend.conflicts)
            held = finish_cycle(self.store, plan, won)
            self._count(before)
            # A partition this owner is reading keeps the Ownership its last CAS returned.
            held.update({p: o for p, o in owner.reading.items() if p in held})
            owner.held = held
            self._sample()
            if self.config.read_time > 0:
                self._start_reads(owner)
            owner.settled = set(held)
            # Jitter, as real schedulers have: owners in lockstep would always find each
            # other's partitions mid-read and never rebalance.
            period = interval * owner.rng.uniform(1 - self.config.jitter, 1 + self.config.jitter)
            yield max(start + period, self.t + lat)

    def _start_reads(self, owner: _Owner) -> None:
        for p in sorted(owner.held):
            if p in owner.reading or p not in owner.settled:
                continue
            own = owner.held[p]
            start = own.progress.sequence_number + 1 if own.progress else 0
            try:
                started = self.store.record_intent(own, start, start + 99)
            except OwnershipLostError:
                self.fenced_writes += 1
                del owner.held[p]
                continue
            self._check_double(owner, p)
            owner.held[p] = owner.reading[p] = started
            when = owner.resume_time(self.t + self.config.read_time)
            self._at(when, functools.partial(self._end_read, owner, p))

    def _end_read(self, owner: _Owner, p: str) -> None:
        own = owner.reading.pop(p, None)
        if own is None or not owner.alive or own.intent is None:
            return
        try:
            done = self.store.checkpoint(own, own.intent.end, None)
        except OwnershipLostError:
            self.fenced_writes += 1
            owner.held.pop(p, None)
            return
        if p in owner.held:
            owner.held[p] = done

    # -- metrics -------------------------------------------------------------------------------
    def _sample(self) -> None:
        now = self._clock()
        live = {o.owner_id for o in self.owners if o.alive}
        counts: Counter[str] = Counter({o: 0 for o in live})
        holders: list[str] = []
        unowned = 0
        for p in self.targets:
            owner, modified = self.backend.holder.get(p, ("", now))
            if owner in live and now - modified < self.expiry:
                counts[owner] += 1
                holders.append(owner)
            else:
                unowned += 1
                holders.append("")
        balanced = (
            unowned == 0 and bool(counts) and max(counts.values()) - min(counts.values()) <= 1
        )
        self._samples.append((self.t, balanced, tuple(holders) if not unowned else None, unowned))

    def run(self) -> SimResult:
        """Run the scenario to its end and compute the metrics."""
        tick = 1.0
        next_tick = 0.0
        quiet_since = 0.0
        last_signature: tuple[str, ...] | None = None
        while self._queue:
            when = self._queue[0][0]
            if when > self.cap:
                break
            while next_tick <= when:
                self.t = next_tick
                self._sample()
                next_tick += tick
                sig = self._samples[-1][2]
                if sig is None or sig != last_signature:
                    last_signature, quiet_since = sig, self.t
                elif self.t >= self.horizon and self.t - quiet_since >= 5 * self.config.interval:
                    return self._result()
            self.t = when
            _, _, action = heapq.heappop(self._queue)
            action()
        return self._result()

    def _since_disturbance(self, good: Callable[[int], bool]) -> float | None:
        first_good = None
        for i in range(len(self._samples) - 1, -1, -1):
            if not good(i):
                break
            first_good = self._samples[i][0]
        if first_good is None:
            return None
        return round(max(first_good - self.disturbance, 0.0), 3)

    def _result(self) -> SimResult:
        samples = self._samples
        unowned = sum(
            samples[i][3] * (samples[i + 1][0] - samples[i][0]) for i in range(len(samples) - 1)
        )
        final = samples[-1][2] if samples else None

        def balanced(i: int) -> bool:
            return samples[i][1] or samples[i][0] < self.disturbance

        def stable(i: int) -> bool:
            return (final is not None and samples[i][2] == final) or samples[i][0] < (
                self.disturbance
            )

        counts = Counter(h for h in (final or ()) if h)
        return SimResult(
            strategy=self.config.strategy,
            scenario=self.config.scenario,
            partitions=self.partitions,
            owners=self.config.owners,
            seed=self.config.seed,
            time_to_balanced=self._since_disturbance(balanced),
            time_to_stable=self._since_disturbance(stable) if final is not None else None,
            moves=self.backend.moves,
            cas_conflicts=self.balancing_conflicts,
            storage_ops=self.balancing_ops,
            unowned_partition_seconds=round(unowned, 3),
            double_owner_moments=self.double_owner_moments,
            fenced_writes=self.fenced_writes,
            simulated_seconds=round(self.t, 3),
            final_counts=dict(sorted(counts.items())),
        )


def simulate(config: SimConfig, planner: Planner = plan_claims) -> SimResult:
    """Run one simulation (deterministic for a given config, seed included)."""
    return Simulation(config, planner).run()
