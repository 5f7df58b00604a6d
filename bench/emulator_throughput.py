"""Is the emulator ever the bottleneck? Real-SDK send and receive rates, and CPU on both sides.

For N events of 1 KB (default 20,000) on a 1-partition and a 4-partition hub it measures:

* send: the real ``EventHubProducerClient.send_batch`` (batches per partition, round-robin);
* receive: the real ``EventHubConsumerClient.receive_batch`` from the start of every partition
  (one client; for 4 partitions it reads all of them);

and prints events/s, the CPU seconds of the emulator process and of the client process, CPU
microseconds per event on each side, and the comparison with the target: the emulator's CPU per
event at most a third of the SDK client's. The emulator runs in its own process
(``python -m dagster_eventhub_ingest.emulator serve``) so the two are measured apart; it is always
stopped. Run:

    uv run --frozen python bench/emulator_throughput.py
    uv run --frozen python bench/emulator_throughput.py --events 50000 --size 1024
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dagster_eventhub_ingest.emulator.testing import emulator_subprocess  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from _report import add_json_flag, report  # noqa: E402

TARGET_RATIO = 1 / 3


@contextmanager
def emulator_process(hubs: dict[str, int]) -> Iterator[tuple[str, psutil.Process]]:
    """The emulator in its own process; yields (connection string, its psutil handle)."""
    with emulator_subprocess(hubs) as (conn, proc):
        yield conn, psutil.Process(proc.pid)


def _cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


class Meter:
    """Wall time and CPU seconds of this process and of the emulator between start and stop."""

    def __init__(self, emulator: psutil.Process) -> None:
        self.emulator = emulator
        self.me = psutil.Process()

    def __enter__(self) -> Meter:
        self.t0 = time.perf_counter()
        self.c0, self.e0 = _cpu(self.me), _cpu(self.emulator)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.wall = time.perf_counter() - self.t0
        self.client_cpu = _cpu(self.me) - self.c0
        self.emulator_cpu = _cpu(self.emulator) - self.e0


def send(conn: str, hub: str, partitions: int, events: int, size: int) -> Meter:
    """Send ``events`` bodies of ``size`` bytes with the real producer; return the meter."""
    from azure.eventhub import EventData, EventHubProducerClient

    body = os.urandom(size // 2 + 1).hex().encode()[:size]
    producer = EventHubProducerClient.from_connection_string(conn, eventhub_name=hub)
    with producer:
        # Open every partition's link outside the measurement (each costs ~1 s of SDK start-up).
        for pid in range(partitions):
            producer.send_batch([EventData(b"warm-up")], partition_id=str(pid))
        with Meter(_EMULATOR) as meter:
            sent, pid = 0, 0
            while sent < events:
                batch = producer.create_batch(partition_id=str(pid % partitions))
                while sent < events:
                    try:
                        batch.add(EventData(body))
                    except ValueError:
                        break
                    sent += 1
                producer.send_batch(batch)
                pid += 1
    return meter


def receive(conn: str, hub: str, partitions: int, events: int) -> tuple[Meter, float]:
    """Read every partition from the start until ``events`` arrived; (meter, steady events/s)."""
    from azure.eventhub import EventHubConsumerClient

    consumer = EventHubConsumerClient.from_connection_string(
        conn, consumer_group="$Default", eventhub_name=hub
    )
    count = 0
    first = last = 0.0
    done = threading.Event()

    def on_batch(_ctx: Any, batch: list[Any]) -> None:
        nonlocal count, first, last
        if not batch:
            return
        now = time.perf_counter()
        if count == 0:
            first = now
        count += len(batch)
        last = now
        if count >= events:
            done.set()

    with Meter(_EMULATOR) as meter:
        thread = threading.Thread(
            target=consumer.receive_batch,
            kwargs={
                "on_event_batch": on_batch,
                "starting_position": "-1",
                "max_batch_size": 300,
                "max_wait_time": 1,
            },
            daemon=True,
        )
        thread.start()
        if not done.wait(300):
            raise RuntimeError(f"only {count} of {events} events arrived")
    consumer.close()
    thread.join(10)
    steady = (count - 1) / (last - first) if last > first else float("nan")
    return meter, steady


_EMULATOR: psutil.Process


def _row(label: str, events: int, meter: Meter, rate: float) -> tuple[str, float, dict]:
    client_us = meter.client_cpu / events * 1e6
    emu_us = meter.emulator_cpu / events * 1e6
    ratio = emu_us / client_us if client_us else float("inf")
    print(
        f"{label:<22} {rate:>10,.0f} {meter.wall:>8.2f} {meter.client_cpu:>9.2f} "
        f"{meter.emulator_cpu:>9.2f} {client_us:>10.1f} {emu_us:>10.1f} {ratio:>7.2f}"
    )
    figures = {
        "events_per_second": round(rate),
        "wall_s": round(meter.wall, 2),
        "client_cpu_us_per_event": round(client_us, 2),
        "emulator_cpu_us_per_event": round(emu_us, 2),
        "emulator / client CPU": round(ratio, 3),
    }
    return label, ratio, figures


def main() -> None:
    """Run the measurements and print the table and the verdict."""
    global _EMULATOR
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    add_json_flag(parser)
    args = parser.parse_args()
    with report("emulator_throughput.py", args.json) as rep:
        _main(args, rep)


def _main(args: argparse.Namespace, rep: Any) -> None:
    global _EMULATOR
    hubs = {"bench-p1": 1, "bench-p4": 4}
    print(
        f"emulator throughput with the real azure-eventhub SDK: {args.events:,} events of "
        f"{args.size} bytes, {psutil.cpu_count()} CPUs\n"
    )
    header = (
        f"{'phase':<22} {'events/s':>10} {'wall s':>8} {'client s':>9} {'emu s':>9} "
        f"{'client us/ev':>10} {'emu us/ev':>10} {'emu/cli':>7}"
    )
    print(header)
    print("-" * len(header))
    ratios = []
    with emulator_process(hubs) as (conn, proc):
        _EMULATOR = proc
        for hub, parts in hubs.items():
            meter = send(conn, hub, parts, args.events, args.size)
            ratios.append(
                _row(f"send {parts} partition(s)", args.events, meter, args.events / meter.wall)
            )
            meter, steady = receive(conn, hub, parts, args.events)
            ratios.append(_row(f"receive {parts} partition(s)", args.events, meter, steady))
    for label, _, figures in ratios:
        rep.add(label, figures)
    worst = rep.add("worst emulator / client CPU", round(max(r for _, r, _ in ratios), 3))
    rep.add("target: worst emulator / client CPU <=", TARGET_RATIO)
    print(
        "\nreceive events/s is the steady rate from first to last event (client start-up excluded);"
        "\nCPU columns cover the whole phase. Target: emulator CPU per event <= 1/3 of the "
        f"client's.\nworst emulator/client CPU ratio: {worst:.2f} -> "
        f"{'MET' if worst <= TARGET_RATIO else 'NOT MET'} (target <= {TARGET_RATIO:.2f})"
    )


if __name__ == "__main__":
    main()
