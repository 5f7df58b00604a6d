"""The claim cycle the ingestion run calls: list once, decide, claim by CAS, renew.

One cycle costs three storage calls to look (store clock, list heartbeats, list ownership; the
clock is free on the in-memory backend) plus one heartbeat put, then two calls per claim and two
per renewal. It is split in three steps (:func:`plan_claims`, :func:`execute_claim`,
:func:`finish_cycle`) so the simulator can interleave owners between them and run exactly this
code; :func:`claim_cycle` chains them for the run.

The batch-run rule, enforced here whatever the strategy proposes: a cycle never takes a
partition from a live peer that has recorded its own intent on it (it is reading). It takes
partitions that are unowned, released, expired (store clock), or held by an owner known dead
(``is_owner_dead``, even with an intent: the new owner replays it), and surplus partitions a
live peer holds without an intent of its own.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from dagster_eventhub_ingest.ops.balancing.base import (
    BalanceView,
    BalancingStrategy,
    Claim,
    RunLog,
    log_line,
)
from dagster_eventhub_ingest.ops.balancing.liveness import (
    DeathCheck,
    Heartbeat,
    delete_heartbeat,
    list_heartbeats,
    write_heartbeat,
)
from dagster_eventhub_ingest.ops.balancing.strategies import DelayRace, get_strategy
from dagster_eventhub_ingest.resources.errors import ConfigurationError, OwnershipLostError
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.records import Ownership

__all__ = [
    "CyclePlan",
    "ExpectedPeers",
    "build_view",
    "claim_cycle",
    "execute_claim",
    "finish_cycle",
    "join",
    "leave",
    "plan_claims",
]

logger = logging.getLogger(__name__)

ExpectedPeers = Callable[[], Collection[str]]
"""``expected_peers() -> owner ids``: peers an orchestrator knows are starting (a hint)."""

RENEW_FRACTION = 0.5
"""Idle leases older than this fraction of the expiry are renewed by the cycle."""


@dataclass
class CyclePlan:
    """The outcome of looking at the store once: the view, the listed blobs and the claims."""

    owner_id: str
    now: datetime
    expiry: timedelta
    view: BalanceView
    ownerships: dict[str, Ownership]
    claims: list[Claim]
    heartbeat: Heartbeat | None = None
    dropped: list[Claim] = field(default_factory=list)
    #: Where takeover and dropped-claim lines also go (the run's log), besides this module's.
    run_log: RunLog | None = None


def _dead_check(is_owner_dead: DeathCheck | None) -> Callable[[str], bool]:
    cache: dict[str, bool] = {}

    def dead(owner: str) -> bool:
        if is_owner_dead is None:
            return False
        if owner not in cache:
            try:
                cache[owner] = bool(is_owner_dead(owner))
            except Exception:  # unsure means alive: never take from a live owner
                logger.warning("is_owner_dead(%r) failed; treating the owner as alive", owner)
                cache[owner] = False
        return cache[owner]

    return dead


def build_view(
    owner_id: str,
    targets: Sequence[str],
    now: datetime,
    expiry: timedelta,
    ownerships: Mapping[str, Ownership],
    heartbeats: Mapping[str, Heartbeat],
    is_owner_dead: DeathCheck | None = None,
    expected: Collection[str] = (),
) -> BalanceView:
    """The :class:`BalanceView` of ``owner_id`` from listed blobs (pure, no I/O).

    ``expected``: owners an orchestrator knows are starting (e.g. Dagster runs of the same
    partitions, launched but not yet heartbeating); they count as live peers, so this owner
    claims only its share and leaves theirs free for when they arrive.
    """
    dead = _dead_check(is_owner_dead)
    live = {owner_id}
    live.update(
        o for o, hb in heartbeats.items() if hb.is_fresh(now, expiry) and o != "" and not dead(o)
    )
    live.update(o for o in expected if o and not dead(o))
    holders: dict[str, str] = {}
    started: set[str] = set()
    lease_age: dict[str, float] = {}
    departed: set[str] = set()
    for p in targets:
        own = ownerships.get(p)
        if own is None or own.is_released:
            continue
        holder = own.owner_id
        if holder != owner_id:
            if own.is_expired(now, expiry) or dead(holder):
                departed.add(holder)
                continue
            live.add(holder)  # an unexpired lease proves life even without a heartbeat (SDK)
        holders[p] = holder
        lease_age[p] = (now - own.last_modified).total_seconds()
        if own.intent is not None and own.intent.owner_id == holder:
            started.add(p)
    departed -= live
    far = datetime.max.replace(tzinfo=now.tzinfo)

    def joined(o: str) -> tuple[datetime, str]:
        hb = heartbeats.get(o)
        if hb is not None:
            return hb.joined, o
        return (now if o == owner_id else far), o

    return BalanceView(
        owner_id=owner_id,
        partitions=tuple(sorted(targets)),
        peers=tuple(sorted(live)),
        holders=holders,
        started=frozenset(started),
        lease_age=lease_age,
        ring=tuple(sorted(live | departed, key=joined)),
    )


def _resolve(strategy: BalancingStrategy | str) -> BalancingStrategy:
    return get_strategy(strategy) if isinstance(strategy, str) else strategy


def plan_claims(
    store: PartitionStore,
    owner_id: str,
    strategy: BalancingStrategy | str,
    *,
    targets: Sequence[str],
    expiry: timedelta,
    is_owner_dead: DeathCheck | None = None,
    rng: random.Random | None = None,
    heartbeat: bool = True,
    heartbeats: Mapping[str, Heartbeat] | None = None,
    expected_peers: ExpectedPeers | None = None,
    run_log: RunLog | None = None,
) -> CyclePlan:
    """Look at the store once, write this owner's heartbeat, and decide what to claim.

    ``heartbeats``: a listing the caller just made (saves one storage call).
    ``expected_peers``: owners about to join (see :func:`build_view`).
    ``run_log``: also receives the dropped-claim line here and the takeover lines of
    :func:`execute_claim` (e.g. Dagster's ``context.log``, so they show in the run's event log).
    """
    strategy = _resolve(strategy)
    if not owner_id:
        raise ConfigurationError("owner_id: must not be empty (use the run id)")
    if expiry <= timedelta(0):
        raise ConfigurationError(f"expiry={expiry!r}: must be positive")
    if isinstance(strategy, DelayRace) and strategy.min_grab_time >= (
        expiry.total_seconds() * RENEW_FRACTION
    ):
        raise ConfigurationError(
            f"delay_race: min_grab_time={strategy.min_grab_time}s must be below half the lease "
            f"expiry ({expiry.total_seconds()}s), otherwise renewals keep every mark closed"
        )
    wanted = {p.lower(): p for p in targets}
    now = store.now()
    if heartbeats is None:
        heartbeats = list_heartbeats(store)
    listed = store.list_ownership()
    ownerships = {wanted[p]: o for p, o in listed.items() if p in wanted}
    hb = write_heartbeat(store, owner_id, heartbeats.get(owner_id)) if heartbeat else None
    expected: list[str] = []
    if expected_peers is not None:
        try:
            expected = [o for o in expected_peers() if o != owner_id]
        except Exception:  # a hint only: without it this owner claims as if alone
            logger.warning("expected_peers failed; claiming without them", exc_info=True)
    view = build_view(
        owner_id, list(targets), now, expiry, ownerships, heartbeats, is_owner_dead, expected
    )
    proposed = strategy.choose(view, rng or random.Random())
    claims, dropped, seen = [], [], set()
    for claim in proposed:
        holder = view.holders.get(claim.partition_id)
        if (
            claim.partition_id not in wanted.values()
            or claim.partition_id in seen
            or (holder not in (None, owner_id) and claim.partition_id in view.started)
        ):
            dropped.append(claim)
            continue
        seen.add(claim.partition_id)
        claims.append(claim)
    if dropped:
        log_line(
            logger,
            run_log,
            logging.WARNING,
            f"dropped claims hub={store.hub.describe()} "
            f"partitions={[c.partition_id for c in dropped]} owner={owner_id} "
            f"strategy={strategy.name}: {len(dropped)} proposed claim(s) not attempted (started "
            "by a live peer, not a target, or duplicated)",
        )
    return CyclePlan(owner_id, now, expiry, view, ownerships, claims, hb, dropped, run_log)


def execute_claim(store: PartitionStore, plan: CyclePlan, claim: Claim) -> Ownership | None:
    """Attempt one claim by CAS on the ETag seen in the plan; None when the race was lost."""
    previous = plan.ownerships.get(claim.partition_id)
    won = store.claim(claim.partition_id, plan.owner_id, previous)
    if won is not None and previous is not None and previous.owner_id not in ("", plan.owner_id):
        level, reason = _takeover_reason(plan, previous, claim)
        pending = previous.intent
        log_line(
            logger,
            plan.run_log,
            level,
            f"took hub={store.hub.describe()} partition={claim.partition_id} "
            f"owner={plan.owner_id} from={previous.owner_id} reason={reason}"
            + (
                f"; its pending range [{pending.start}, {pending.end}] (left by "
                f"{pending.owner_id or 'unknown'}) is replayed"
                if pending is not None
                else ""
            ),
        )
    return won


def _takeover_reason(plan: CyclePlan, previous: Ownership, claim: Claim) -> tuple[int, str]:
    """Log level and reason of taking ``previous``: an ended owner's lease is a warning, a
    balancing steal from a live peer is routine."""
    if previous.is_expired(plan.now, plan.expiry):
        age = (plan.now - previous.last_modified).total_seconds()
        return logging.WARNING, (
            f"expired (not renewed for {age:.0f} s on the store clock, expiry "
            f"{plan.expiry.total_seconds():g} s)"
        )
    if claim.reason == "free":  # held, unexpired, yet free: its owner is known dead
        return logging.WARNING, "owner-ended (its run is known failed or canceled)"
    return logging.INFO, claim.reason


def finish_cycle(
    store: PartitionStore,
    plan: CyclePlan,
    won: Mapping[str, Ownership],
    *,
    renew: bool = True,
) -> dict[str, Ownership]:
    """What ``plan.owner_id`` holds after its claims; renews idle leases past half the expiry.

    Leases this owner is reading (intent recorded by it) are not renewed here: renewing changes
    the ETag under the caller, whose record_intent/checkpoint CAS renews them instead.
    """
    attempted = {c.partition_id for c in plan.claims}
    held = {
        p: own
        for p, own in plan.ownerships.items()
        if own.owner_id == plan.owner_id
        and p not in attempted
        # another process's lease under this owner id is never used as this one's
        and (not store.instance or own.instance in ("", store.instance))
    }
    held.update(won)
    if not renew:
        return held
    threshold = plan.expiry * RENEW_FRACTION
    for p, own in list(held.items()):
        reading = own.intent is not None and own.intent.owner_id == plan.owner_id
        if p in won or reading or plan.now - own.last_modified < threshold:
            continue
        try:
            held[p] = store.renew(own)
        except OwnershipLostError:
            del held[p]
    return held


def claim_cycle(
    store: PartitionStore,
    owner_id: str,
    strategy: BalancingStrategy | str,
    *,
    targets: Sequence[str],
    expiry: timedelta,
    is_owner_dead: DeathCheck | None = None,
    rng: random.Random | None = None,
    renew: bool = True,
    join_grace: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
    expected_peers: ExpectedPeers | None = None,
    run_log: RunLog | None = None,
) -> dict[str, Ownership]:
    """One balancing cycle for ``owner_id``; returns what it holds now among ``targets``.

    Lists the store once, applies the batch-run rule (module docstring), asks ``strategy``
    which partitions to claim, claims them by CAS in order of the strategy's delays (losing a
    race is normal) and renews idle leases. On this owner's first cycle (no heartbeat of its
    own yet) it writes its heartbeat and waits ``join_grace`` seconds before looking, so runs
    started together see each other and split the partitions in one claim phase instead of
    each claiming everything. The returned :class:`Ownership` s carry the ETags
    to use for the next CAS (record_intent, checkpoint, release). Takeovers and dropped claims
    are logged here and, when given, to ``run_log`` (the run's own log).

    Example::

        held = claim_cycle(store, run_id, "balanced", targets=["0", "1", "2", "3"],
                           expiry=timedelta(seconds=60), is_owner_dead=run_failed)
    """
    heartbeats: dict[str, Heartbeat] | None = list_heartbeats(store)
    if heartbeats is not None and owner_id not in heartbeats and join_grace > 0:
        join(store, owner_id)
        sleep(join_grace)
        heartbeats = None
    plan = plan_claims(
        store,
        owner_id,
        strategy,
        targets=targets,
        expiry=expiry,
        is_owner_dead=is_owner_dead,
        rng=rng,
        heartbeats=heartbeats,
        expected_peers=expected_peers,
        run_log=run_log,
    )
    won: dict[str, Ownership] = {}
    start, slept = time.monotonic(), 0.0
    for claim in sorted(plan.claims, key=lambda c: c.delay):
        # max(): an injected sleep (tests, simulations) does not move the monotonic clock.
        wait = claim.delay - max(time.monotonic() - start, slept)
        if wait > 0:
            sleep(wait)
            slept += wait
        own = execute_claim(store, plan, claim)
        if own is not None:
            won[claim.partition_id] = own
    return finish_cycle(store, plan, won, renew=renew)


def join(store: PartitionStore, owner_id: str) -> Heartbeat:
    """Announce ``owner_id`` (first heartbeat) so peers count it before it claims anything."""
    return write_heartbeat(store, owner_id)


def leave(store: PartitionStore, owner_id: str, held: Mapping[str, Ownership]) -> None:
    """Graceful exit: release what ``owner_id`` holds and delete its heartbeat.

    Intents and fenced checkpoints stay on the blobs, so a peer resumes exactly where this
    owner stopped.
    """
    for own in held.values():
        store.release(own)
    delete_heartbeat(store, owner_id)
