"""The claim cycle over the in-memory store (Blob CAS semantics) on a controllable clock."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pytest

from dagster_eventhub_ingest.ops.balancing import (
    claim_cycle,
    get_strategy,
    join,
    leave,
    list_heartbeats,
    plan_claims,
)
from dagster_eventhub_ingest.resources.errors import ConfigurationError
from dagster_eventhub_ingest.resources.store.memory import InMemoryBackend
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.records import HubRef

EXPIRY = timedelta(seconds=60)
PIDS = [str(i) for i in range(8)]


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2030, 1, 1, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> PartitionStore:
    return PartitionStore(InMemoryBackend(clock), HubRef("ns.servicebus.windows.net", "hub"))


def cycle(store: PartitionStore, clock: Clock, owner: str, strategy: str = "greedy", **kw):
    kw.setdefault("targets", PIDS)
    kw.setdefault("expiry", EXPIRY)
    return claim_cycle(store, owner, strategy, rng=random.Random(0), sleep=clock.sleep, **kw)


def test_owners_that_joined_together_split_in_one_cycle_without_conflicts(store, clock) -> None:
    for owner in "abcd":
        join(store, owner)
    held = {o: cycle(store, clock, o) for o in "abcd"}
    assert sorted(len(h) for h in held.values()) == [2, 2, 2, 2]
    assert set().union(*held.values()) == set(PIDS)
    assert store.backend.conflicts == 0


def test_first_cycle_heartbeats_and_waits_the_join_grace(store, clock) -> None:
    start = clock.now
    cycle(store, clock, "a", join_grace=1.5)
    assert clock.now - start == timedelta(seconds=1.5)
    assert "a" in list_heartbeats(store)
    cycle(store, clock, "a", join_grace=1.5)  # known now: no second wait
    assert clock.now - start == timedelta(seconds=1.5)


def test_an_owner_with_no_partitions_counts_for_the_fair_share(store, clock) -> None:
    assert len(cycle(store, clock, "a")) == 8
    join(store, "b")
    assert len(cycle(store, clock, "a")) == 8  # a stops at its share but keeps what it has
    got = cycle(store, clock, "b")  # greedy steals one per cycle from the owner above share
    assert len(got) == 1
    for _ in range(5):
        cycle(store, clock, "b")
    assert len(cycle(store, clock, "b")) == 4
    assert len(cycle(store, clock, "a")) == 4


def test_a_started_partition_is_never_taken_from_a_live_peer(store, clock) -> None:
    held = cycle(store, clock, "a")
    reading = {pid: store.record_intent(held[pid], 0, 9) for pid in PIDS}
    join(store, "b")
    for _ in range(4):
        clock.sleep(20)
        # a is reading: it renews its leases itself and heartbeats through its cycle.
        reading = {pid: store.renew(own) for pid, own in reading.items()}
        cycle(store, clock, "a")
        assert cycle(store, clock, "b") == {}
    # Once a's leases expire (store clock) b takes them, keeping a's intent for the replay.
    clock.sleep(61)
    got = cycle(store, clock, "b")
    assert len(got) == 8
    assert all(
        o.intent is not None and (o.intent.start, o.intent.end) == (0, 9) for o in got.values()
    )


def test_known_dead_owner_is_taken_over_at_once_even_mid_read(store, clock) -> None:
    held = cycle(store, clock, "a")
    store.record_intent(held["0"], 5, 7)
    got = cycle(store, clock, "b", is_owner_dead=lambda o: o == "a")
    assert set(got) == set(PIDS)
    assert got["0"].intent is not None and got["0"].intent.owner_id == "a"


def test_a_failing_death_check_means_alive(store, clock) -> None:
    cycle(store, clock, "a")

    def broken(owner: str) -> bool:
        raise RuntimeError("dagster instance unreachable")

    # a counts as alive: b only steals one surplus partition, it does not take all eight.
    assert len(cycle(store, clock, "b", is_owner_dead=broken)) == 1
    owners = [o.owner_id for o in store.list_ownership().values()]
    assert owners.count("a") == 7


def test_expired_heartbeat_is_not_a_peer_but_an_unexpired_lease_is(store, clock) -> None:
    join(store, "ghost")
    clock.sleep(61)
    plan = plan_claims(store, "a", "greedy", targets=PIDS, expiry=EXPIRY)
    assert plan.view.peers == ("a",)
    # An EventProcessorClient writes no heartbeat; its unexpired lease makes it a peer.
    store.claim("0", "sdk-client", None)
    plan = plan_claims(store, "a", "greedy", targets=PIDS, expiry=EXPIRY)
    assert plan.view.peers == ("a", "sdk-client")


def test_idle_leases_are_renewed_but_not_the_ones_being_read(store, clock) -> None:
    held = cycle(store, clock, "a")
    reading = store.record_intent(held["0"], 0, 1)
    clock.sleep(31)
    after = cycle(store, clock, "a")
    assert after["1"].last_modified == clock.now
    assert after["0"].etag == reading.etag


def test_leave_releases_everything_and_drops_the_heartbeat(store, clock) -> None:
    held = cycle(store, clock, "a")
    leave(store, "a", held)
    assert all(o.is_released for o in store.list_ownership().values())
    assert "a" not in list_heartbeats(store)
    assert len(cycle(store, clock, "b")) == 8


def test_configuration_errors_name_the_problem(store, clock) -> None:
    with pytest.raises(ConfigurationError, match="valid: greedy"):
        cycle(store, clock, "a", strategy="fastest")
    with pytest.raises(ConfigurationError, match="min_grab_time=40"):
        claim_cycle(
            store,
            "a",
            get_strategy("delay_race", min_grab_time=40),
            targets=PIDS,
            expiry=EXPIRY,
            sleep=clock.sleep,
        )
    with pytest.raises(ConfigurationError, match="owner_id"):
        cycle(store, clock, "")


def test_delay_race_sleeps_its_delays_in_order(store, clock) -> None:
    start = clock.now
    got = cycle(store, clock, "a", strategy="delay_race", join_grace=0)
    assert len(got) == 8
    # Claims i = 0..7 wait (i + 0.5) * 0.05 s from the start of the cycle.
    assert clock.now - start == timedelta(seconds=7.5 * 0.05)


class RunLogRecorder:
    """A run's log (Dagster's ``context.log`` stand-in): what reached it, by level."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def info(self, msg: str) -> None:
        self.lines.append(("info", msg))

    def warning(self, msg: str) -> None:
        self.lines.append(("warning", msg))


def test_takeovers_reach_the_run_log_naming_hub_partition_owners_and_the_replay(
    store, clock
) -> None:
    hub = store.hub.describe()
    held = cycle(store, clock, "a")
    store.record_intent(held["0"], 5, 7)
    clock.sleep(61)
    log = RunLogRecorder()
    assert len(cycle(store, clock, "b", run_log=log)) == 8
    expired = [m for level, m in log.lines if level == "warning" and " partition=0 " in m]
    assert expired == [  # 61 s + b's join grace (1 s)
        f"took hub={hub} partition=0 owner=b from=a reason=expired (not renewed for 62 s on the "
        "store clock, expiry 60 s); its pending range [5, 7] (left by a) is replayed"
    ]
    assert len(log.lines) == 8 and {level for level, _ in log.lines} == {"warning"}
    # An owner known dead: taken before expiry, said so.
    log = RunLogRecorder()
    cycle(store, clock, "c", is_owner_dead=lambda o: o == "b", run_log=log)
    assert all("from=b reason=owner-ended" in m for _, m in log.lines) and len(log.lines) == 8
    # A balancing steal from a live peer is routine: info.
    log = RunLogRecorder()
    join(store, "d")
    assert len(cycle(store, clock, "d", run_log=log)) == 1
    ((level, line),) = log.lines
    assert (
        level == "info" and line.startswith(f"took hub={hub} partition=") and "reason=steal" in line
    )


def test_dropped_claims_reach_the_run_log(store, clock) -> None:
    from dagster_eventhub_ingest.ops.balancing import BalanceView, Claim

    held = cycle(store, clock, "a")
    store.record_intent(held["3"], 0, 9)

    class Grabby:
        name = "grabby"

        def choose(self, view: BalanceView, rng: random.Random) -> list[Claim]:
            return [Claim("3", "steal")]  # started by a live peer: the cycle refuses it

    log = RunLogRecorder()
    plan = plan_claims(store, "b", Grabby(), targets=PIDS, expiry=EXPIRY, run_log=log)  # type: ignore[arg-type]
    assert plan.claims == [] and plan.run_log is log
    ((level, line),) = log.lines
    assert level == "warning"
    assert line.startswith(f"dropped claims hub={store.hub.describe()} partitions=['3'] owner=b ")
