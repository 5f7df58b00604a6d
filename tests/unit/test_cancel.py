"""Stopping a run (ops/run/cancel.py) as pure logic: the in-memory store (Blob's CAS semantics),
the fake hub and ingestor of tests/support/run_fakes.py. The real processes (the CLI, a Dagster run,
an Airflow task) are in tests/integration/test_cancellation_integration.py,
tests/integration/test_dagster_terminate_integration.py and tests/airflow/.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest

from dagster_eventhub_ingest.ops.run.cancel import Cancellation
from dagster_eventhub_ingest.ops.run.processor import Processor
from dagster_eventhub_ingest.resources.errors import RunCancelledError
from dagster_eventhub_ingest.resources.store.memory import InMemoryBackend
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from tests.support.run_fakes import HUB, FakeHub, FakeIngestor, config, greedy_claim


def _processor(
    cancel: Cancellation, ingestor: FakeIngestor, store: PartitionStore, hub: FakeHub
) -> Processor:
    cfg = config()
    return Processor(
        cfg,
        store,
        hub,
        ingestor,
        owner_id="run-a",
        claim=greedy_claim(store, "run-a", cfg.lease_expiry_seconds),
        cancel=cancel,
    )


def test_a_run_stopped_mid_read_releases_its_leases_keeps_its_intents_and_writes_nothing() -> None:
    hub = FakeHub(partitions=3)
    hub.send_all(10)
    store = PartitionStore(InMemoryBackend(), HUB)
    cancel = Cancellation()
    reading, interrupted = threading.Event(), threading.Event()

    def blocked(ranges: Mapping[str, Any]) -> None:
        # The Spark job: runs until the cancellation's hook interrupts it.
        reading.set()
        assert interrupted.wait(10)
        raise RuntimeError("[SPARK_JOB_CANCELLED] Job 1 cancelled part of cancelled job tags")

    ingestor = FakeIngestor(hub, before_write=blocked)
    cancel.on_cancel(interrupted.set)
    proc = _processor(cancel, ingestor, store, hub)
    threading.Thread(target=lambda: (reading.wait(10), cancel.cancel("SIGTERM received"))).start()
    with pytest.raises(RunCancelledError) as err:
        cancel.run(proc.run)
    assert "stopped while reading and writing (SIGTERM received)" in str(err.value)
    assert err.value.retryable
    assert ingestor.sink == {} and store.list_checkpoints() == {}
    owns = store.list_ownership()
    assert set(owns) == {"0", "1", "2"}
    for own in owns.values():
        assert own.is_released
        assert own.intent is not None and (own.intent.start, own.intent.end) == (0, 9)


def test_a_write_that_committed_before_the_stop_is_checkpointed_then_the_run_stops() -> None:
    """Finishing the commit: the cancel comes while the (fake) write returns; its ranges are
    checkpointed, and the run claims nothing more."""
    hub = FakeHub(partitions=2)
    hub.send_all(10)
    store = PartitionStore(InMemoryBackend(), HUB)
    cancel = Cancellation()
    ingestor = FakeIngestor(hub)
    ingestor.after_write = lambda ranges: cancel.cancel("SIGINT received")
    hub_more = [0]

    def grow(_: Mapping[str, Any]) -> None:
        if not hub_more[0]:
            hub_more[0] = 1
            hub.send_all(5)  # more to read: a next cycle would claim again

    ingestor.before_write = grow
    proc = _processor(cancel, ingestor, store, hub)
    with pytest.raises(RunCancelledError, match="before claiming"):
        cancel.run(proc.run)
    cps = {p: c.sequence_number for p, c in store.list_checkpoints().items()}
    assert cps == {"0": 9, "1": 9}  # the committed batch was checkpointed
    assert len(ingestor.calls) == 1  # and nothing else was read
    assert all(o.is_released for o in store.list_ownership().values())


def test_the_hosts_interrupt_waits_for_the_run_to_wind_down_and_is_raised_again() -> None:
    cancel = Cancellation()
    wound_down = threading.Event()

    def work() -> None:
        while not cancel.wait(0.05):
            pass
        time.sleep(0.3)  # releasing leases
        wound_down.set()
        cancel.check("before reading")

    def interrupt_soon() -> None:
        time.sleep(0.2)
        import _thread

        _thread.interrupt_main()  # a KeyboardInterrupt in the waiting (main) thread

    threading.Thread(target=interrupt_soon).start()
    with pytest.raises(KeyboardInterrupt):
        cancel.run(work)
    assert wound_down.is_set() and cancel.reason == "interrupted: KeyboardInterrupt"


def test_a_run_that_does_not_wind_down_is_forced_then_given_up_on() -> None:
    cancel = Cancellation()
    forced = threading.Event()
    calls: list[float] = []
    cancel.on_cancel(lambda: calls.append(time.monotonic()))
    cancel.on_force(forced.set)

    def work() -> str:
        cancel.cancel("on_kill")
        assert forced.wait(5)  # only the force hook unblocks it (a JVM call)
        raise RuntimeError("the Spark session was closed")

    started = time.monotonic()
    with pytest.raises(RuntimeError, match="closed"):
        cancel.run(work, grace=1.2, force_grace=1.0)
    assert 1.2 <= time.monotonic() - started < 4
    assert len(calls) >= 2  # the interrupt hook is repeated until forced

    stuck = Cancellation()
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(RunCancelledError, match="before it finished"):
        stuck.run(lambda: (stuck.cancel("x"), release.wait(30)), grace=0.3, force_grace=0.3)
    assert time.monotonic() - started < 3
    release.set()


def test_a_cancelled_wait_ends_at_once() -> None:
    cancel = Cancellation()
    threading.Timer(0.1, cancel.cancel, args=("SIGTERM received",)).start()
    started = time.monotonic()
    assert cancel.wait(30) is True
    assert time.monotonic() - started < 5
    cancel.cancel("second reason")
    assert cancel.reason == "SIGTERM received"  # the first one is kept
