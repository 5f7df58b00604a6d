"""The partition store's contract, run on both backends: in-memory and Azure Blob (Azurite).

One suite, parametrized by backend, so the in-memory fake used by fast tests and the simulator
is held to exactly the CAS semantics the real service has.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest

from dagster_eventhub_ingest.resources.errors import CheckpointRegressionError, OwnershipLostError
from dagster_eventhub_ingest.resources.store.memory import InMemoryBackend
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.records import BlobRecord, HubRef, Intent, Ownership


class FakeClock:
    """A store clock the in-memory tests move by hand."""

    def __init__(self) -> None:
        self.t = datetime(2025, 1, 1, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += timedelta(seconds=seconds)


@dataclass
class Harness:
    """One backend under test: how to open a store on it and how to let store time pass."""

    kind: str
    make_store: Callable[[], PartitionStore]
    advance: Callable[[float], None]
    # Short enough to wait out on Azurite, whose Last-Modified has one-second resolution.
    expiry: timedelta

    def raw(self, store: PartitionStore, kind: str, partition_id: str) -> BlobRecord | None:
        """The blob itself, read past the store's parsing (to prove nothing changed)."""
        return store.backend.get(store.hub.prefix(kind) + partition_id)


@pytest.fixture(params=["memory", pytest.param("azurite", marks=pytest.mark.integration)])
def harness(request: pytest.FixtureRequest, hub_ref: HubRef) -> Harness:
    if request.param == "memory":
        clock = FakeClock()
        backend = InMemoryBackend(clock)
        return Harness(
            "memory", lambda: PartitionStore(backend, hub_ref), clock.advance, timedelta(seconds=2)
        )
    factory = request.getfixturevalue("partition_store_factory")
    return Harness("azurite", factory, time.sleep, timedelta(seconds=2))


def wait_out(h: Harness) -> None:
    """Let the lease expiry pass on the store's clock (plus the 1 s HTTP-date resolution)."""
    h.advance(h.expiry.total_seconds() + 1.5)


def test_create_only_claim_twice_second_loses(harness: Harness) -> None:
    a, b = harness.make_store(), harness.make_store()
    won = a.claim("0", "owner-a", None)
    assert won is not None and won.owner_id == "owner-a" and won.epoch == 1
    assert b.claim("0", "owner-b", None) is None
    assert b.get_ownership("0") == won


def test_claim_with_stale_etag_loses(harness: Harness) -> None:
    a, b = harness.make_store(), harness.make_store()
    own_a = a.claim("0", "owner-a", None)
    assert own_a is not None
    seen_by_b = b.list_ownership()["0"]
    own_a = a.renew(own_a)  # moves the ETag after B looked
    assert seen_by_b.etag != own_a.etag
    assert b.claim("0", "owner-b", seen_by_b) is None
    assert a.get_ownership("0") == own_a
    # With a fresh view B's CAS goes through (a takeover; the balancer decides when).
    taken = b.claim("0", "owner-b", b.get_ownership("0"))
    assert taken is not None and taken.owner_id == "owner-b" and taken.epoch == 2


def test_claim_from_listing_etag_wins(harness: Harness) -> None:
    # The balancer claims with ETags from list_ownership(): they must be usable for the CAS.
    store = harness.make_store()
    assert store.claim("3", "owner-a", None) is not None
    listed = store.list_ownership()["3"]
    taken = store.claim("3", "owner-b", listed)
    assert taken is not None and taken.owner_id == "owner-b"


def test_renew_extends_and_detects_loss(harness: Harness) -> None:
    a, b = harness.make_store(), harness.make_store()
    own = a.claim("0", "owner-a", None)
    assert own is not None
    harness.advance(1.1)
    renewed = a.renew(own)
    assert renewed.etag != own.etag
    assert renewed.last_modified > own.last_modified
    assert renewed.owner_id == "owner-a" and renewed.epoch == own.epoch
    with pytest.raises(OwnershipLostError):
        a.renew(own)  # the old ETag is stale now
    stolen = b.claim("0", "owner-b", b.get_ownership("0"))
    assert stolen is not None
    with pytest.raises(OwnershipLostError, match="owner 'owner-a' lost partition 0"):
        a.renew(renewed)


def test_release_then_others_claim_and_stale_release_is_false(harness: Harness) -> None:
    a, b = harness.make_store(), harness.make_store()
    own = a.claim("0", "owner-a", None)
    assert own is not None
    assert a.release(own) is True
    released = b.get_ownership("0")
    assert released is not None and released.is_released and released.owner_id == ""
    assert released.is_expired(b.now(), timedelta(hours=1))  # released = free at once
    assert a.release(own) is False  # already gone: a normal outcome, not an error
    taken = b.claim("0", "owner-b", released)
    assert taken is not None and taken.owner_id == "owner-b"


def test_release_keeps_intent_and_checkpoint(harness: Harness) -> None:
    a, b = harness.make_store(), harness.make_store()
    own = a.claim("1", "owner-a", None)
    assert own is not None
    own = a.record_intent(own, 0, 9)
    own = a.checkpoint(own, 9, "900")
    own = a.record_intent(own, 10, 19)
    assert a.release(own)
    seen = b.get_ownership("1")
    assert seen is not None and seen.is_released
    assert seen.intent == Intent(10, 19, "owner-a")
    assert seen.progress is not None and seen.progress.sequence_number == 9
    assert b.list_checkpoints()["1"].sequence_number == 9
    assert b.list_checkpoints()["1"].offset == "900"


def test_intent_survives_a_crash_and_is_handed_to_the_next_owner(harness: Harness) -> None:
    a = harness.make_store()
    own = a.claim("2", "owner-a", None)
    assert own is not None
    a.record_intent(own, 100, 199)
    del a  # "crash": nothing in memory survives, only the store

    b = harness.make_store()
    seen = b.get_ownership("2")
    assert seen is not None and seen.owner_id == "owner-a"
    assert seen.intent == Intent(100, 199, "owner-a")
    wait_out(harness)
    assert seen.is_expired(b.now(), harness.expiry)
    taken = b.claim("2", "owner-b", seen)
    assert taken is not None and taken.epoch == 2
    assert taken.intent == Intent(100, 199, "owner-a")  # B must replay exactly this range


def test_checkpoint_clears_only_a_completed_intent(harness: Harness) -> None:
    store = harness.make_store()
    own = store.claim("0", "owner-a", None)
    assert own is not None
    own = store.record_intent(own, 10, 19)
    own = store.checkpoint(own, 15, "1500")
    assert own.intent == Intent(10, 19, "owner-a")  # partial progress: still pending
    own = store.checkpoint(own, 19, "1900")
    assert own.intent is None
    again = harness.make_store().get_ownership("0")
    assert again is not None and again.intent is None
    assert again.progress is not None and again.progress.sequence_number == 19
    assert store.list_sdk_checkpoints()["0"].sequence_number == 19


def test_hub_generation_is_set_by_a_reset_and_carried_on_both_blobs(harness: Harness) -> None:
    """A reset after a re-creation records the generation; claims, intents and checkpoints keep
    it (on the ownership blob and the SDK blob); a later intent records the one it is keyed by."""
    store = harness.make_store()
    own = store.claim("5", "owner-a", None)
    assert own is not None
    own = store.checkpoint(own, 49, "4900", hub_created_ms=1000)
    assert own.progress is not None and own.progress.generation is None
    own = store.reset_checkpoint(own, -1, "-1", "re-created", hub_created_ms=2000, generation=2000)
    own = store.record_intent(own, 0, 9, generation=2000)
    assert own.intent is not None and own.intent.generation == 2000
    fresh = harness.make_store()
    taken = fresh.claim("5", "owner-b", fresh.get_ownership("5"))
    assert taken is not None and taken.intent is not None and taken.intent.generation == 2000
    taken = fresh.checkpoint(taken, 9, "900", hub_created_ms=2000)
    assert taken.intent is None
    assert taken.progress is not None and taken.progress.generation == 2000
    sdk = fresh.list_sdk_checkpoints()["5"]
    assert (sdk.sequence_number, sdk.generation) == (9, 2000)
    assert fresh.list_checkpoints()["5"].generation == 2000
    own_blob = harness.raw(fresh, "ownership", "5")
    assert own_blob is not None and own_blob.metadata["ehigeneration"] == "2000"
    assert "ehiintentgeneration" not in own_blob.metadata  # cleared with the intent
    # A reset without a new generation (same hub, checkpoint edited ahead) keeps it.
    taken = fresh.reset_checkpoint(taken, -1, "-1", "edited", hub_created_ms=2000)
    assert taken.progress is not None and taken.progress.generation == 2000
    assert fresh.list_sdk_checkpoints()["5"].generation == 2000


def test_landed_count_moves_once_per_checkpoint_and_only_for_the_owner(harness: Harness) -> None:
    """Each checkpoint adds its batch's events to the partition's landed count in the same CAS:
    on both blobs, across owners, never for a zombie; a reset keeps it (the sink keeps its
    rows); a checkpoint written without a count (an older version) leaves it unknown."""
    store = harness.make_store()
    own = store.claim("3", "owner-a", None)
    assert own is not None
    own = store.checkpoint(own, 9, "900", landed_events=10)
    own = store.checkpoint(own, 14, "1400", landed_events=5)
    assert own.progress is not None and own.progress.landed == 15
    assert store.list_sdk_checkpoints()["3"].landed == 15
    # A second owner takes over after expiry and adds its batch; the zombie cannot.
    wait_out(harness)
    other = harness.make_store()
    taken = other.claim("3", "owner-b", other.get_ownership("3"))
    assert taken is not None
    taken = other.checkpoint(taken, 19, "1900", landed_events=5)
    with pytest.raises(OwnershipLostError):
        store.checkpoint(own, 24, "2400", landed_events=99)
    assert other.list_checkpoints()["3"].landed == 20
    # A checkpoint that lands nothing (None) keeps the count; a reset keeps it too.
    taken = other.checkpoint(taken, 19, "1900")
    taken = other.reset_checkpoint(taken, -1, "-1", "re-created", generation=7)
    assert taken.progress is not None and taken.progress.landed == 20
    assert other.list_sdk_checkpoints()["3"].landed == 20
    # A partition checkpointed before counts were kept: unknown, and stays unknown.
    legacy = harness.make_store()
    old = legacy.claim("4", "owner-a", None)
    assert old is not None
    old = legacy.checkpoint(old, 9, "900")
    old = legacy.checkpoint(old, 19, "1900", landed_events=10)
    assert old.progress is not None and old.progress.landed is None
    assert legacy.list_sdk_checkpoints()["4"].landed is None


def test_checkpoint_never_moves_backwards(harness: Harness) -> None:
    store = harness.make_store()
    own = store.claim("0", "owner-a", None)
    assert own is not None
    own = store.checkpoint(own, 20, "2000")
    before_own = harness.raw(store, "ownership", "0")
    before_cp = harness.raw(store, "checkpoint", "0")
    with pytest.raises(CheckpointRegressionError, match="from 20 to 10"):
        store.checkpoint(own, 10, "1000")
    assert harness.raw(store, "ownership", "0") == before_own
    assert harness.raw(store, "checkpoint", "0") == before_cp
    assert store.checkpoint(own, 20, "2000").progress is not None  # same point: idempotent


def test_concurrent_claims_have_exactly_one_winner(harness: Harness) -> None:
    n = 8
    stores = [harness.make_store() for _ in range(n)]

    def race(previous: dict[int, Ownership | None]) -> list[Ownership | None]:
        results: list[Ownership | None] = [None] * n
        barrier = threading.Barrier(n)

        def claim(i: int) -> None:
            barrier.wait()
            results[i] = stores[i].claim("7", f"owner-{i}", previous[i])

        threads = [threading.Thread(target=claim, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        return results

    first = race(dict.fromkeys(range(n)))  # create-only
    winners = [r for r in first if r is not None]
    assert len(winners) == 1
    assert stores[0].get_ownership("7") == winners[0]

    # Takeover race: everyone holds the same (expired) view; one CAS wins.
    wait_out(harness)
    seen = stores[0].get_ownership("7")
    second = race(dict.fromkeys(range(n), seen))
    winners = [r for r in second if r is not None]
    assert len(winners) == 1
    assert winners[0].epoch == 2
    assert stores[1].get_ownership("7") == winners[0]


def test_expiry_is_judged_on_the_store_clock(harness: Harness) -> None:
    store = harness.make_store()
    own = store.claim("0", "owner-a", None)
    assert own is not None
    assert not own.is_expired(store.now(), harness.expiry)
    wait_out(harness)
    assert own.is_expired(store.now(), harness.expiry)
    renewed = store.renew(own)
    assert not renewed.is_expired(store.now(), harness.expiry)


def test_zombie_cannot_move_the_checkpoint(harness: Harness) -> None:
    a, b = harness.make_store(), harness.make_store()
    own_a = a.claim("5", "owner-a", None)
    assert own_a is not None
    own_a = a.record_intent(own_a, 0, 49)
    own_a = a.checkpoint(own_a, 9, "90")

    # A stalls (GC pause, lost network) past its lease; B sees it expired and takes over.
    wait_out(harness)
    seen = b.get_ownership("5")
    assert seen is not None and seen.is_expired(b.now(), harness.expiry)
    own_b = b.claim("5", "owner-b", seen)
    assert own_b is not None and own_b.epoch == own_a.epoch + 1
    assert own_b.intent == Intent(0, 49, "owner-a")

    ownership_before = harness.raw(b, "ownership", "5")
    checkpoint_before = harness.raw(b, "checkpoint", "5")
    # A wakes up and tries to finish its range: fenced by the ownership blob's ETag.
    with pytest.raises(OwnershipLostError) as lost:
        a.checkpoint(own_a, 49, "490")
    message = str(lost.value)
    assert "owner 'owner-a' lost partition 5" in message
    assert "checkpoint" in message and "another owner claimed it" in message
    with pytest.raises(OwnershipLostError):
        a.record_intent(own_a, 50, 99)
    assert harness.raw(b, "ownership", "5") == ownership_before
    assert harness.raw(b, "checkpoint", "5") == checkpoint_before
    cps = b.list_checkpoints()
    assert cps["5"].sequence_number == 9

    # Even once B moved past A's position, A hears "lost", not a misleading regression.
    own_b = b.checkpoint(own_b, 49, "490")
    with pytest.raises(OwnershipLostError):
        a.checkpoint(own_a, 20, "200")
    assert b.list_checkpoints()["5"].sequence_number == 49
    assert a.release(own_a) is False
    assert b.get_ownership("5") == own_b
