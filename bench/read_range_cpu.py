"""CPU per event of ``read_range`` alone (the reader's own receiver), Python path and native.

Modes: ``python`` (also ``all``, its name when it stood for every pyamqp cut together): each
event decoded from its bytes in Python; ``native``: runs of plain transfers laid out as Arrow
columns by the compiled step (``resources/eventhubs_source/fastpath/``; built first if this
host has no copy). The emulator runs in its own process
(``python -m dagster_eventhub_ingest.emulator serve``); this process reads the same range once per
mode, round after round, each round starting one mode later (the machine is shared: alternating
spreads its noise over every mode), and prints the ``time.process_time()`` per event of each read
and each mode's median. Run:

    source scripts/_bootstrap.sh && uv run --frozen python bench/read_range_cpu.py
    uv run --frozen python bench/read_range_cpu.py --events 20000 --rounds 2  # quicker
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _report import add_json_flag, report  # noqa: E402
from source_throughput import emulator_process, send  # noqa: E402

MODES = {"python": False, "all": False, "native": True}


def set_mode(mode: str) -> None:
    """The native step on or off for the next read_range."""
    from dagster_eventhub_ingest.resources.eventhubs_source.fastpath import loader

    os.environ[loader.NATIVE_ENV] = "1" if MODES[mode] else "0"
    loader.reset_for_tests()


def send_with_properties(settings: Any, events: int, size: int, properties: int) -> None:
    """``events`` bodies of ``size`` bytes to partition 0, each with ``properties`` application
    properties (strings and integers), a message id and a content type."""
    from azure.eventhub import EventData

    producer = settings.producer_client()
    body = os.urandom(size // 2).hex().encode()[:size]
    try:
        batch = producer.create_batch(partition_id="0")
        for n in range(events):
            event = EventData(body)
            event.properties = {
                f"p{j}": (f"value-{n}-{j}" if j % 2 else n * 10 + j) for j in range(properties)
            }
            event.message_id = f"msg-{n}"
            event.content_type = "application/json"
            try:
                batch.add(event)
            except ValueError:
                producer.send_batch(batch)
                batch = producer.create_batch(partition_id="0")
                batch.add(event)
        producer.send_batch(batch)
    finally:
        producer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024, help="body bytes")
    parser.add_argument("--prefetch", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default="python,native", help=f"of {', '.join(MODES)}")
    parser.add_argument(
        "--properties",
        type=int,
        default=0,
        help="application properties per event (and a message id and content type), as "
        "IoT Hub routes events; 0: plain events",
    )
    add_json_flag(parser)
    args = parser.parse_args()
    with report("read_range_cpu.py", args.json) as rep:
        _main(args, rep)


def _main(args: argparse.Namespace, rep: Any) -> None:

    from dagster_eventhub_ingest.resources.eventhubs_source import PartitionRange, read_range
    from dagster_eventhub_ingest.resources.eventhubs_source.receiver import sdk_receive
    from dagster_eventhub_ingest.resources.settings import EventHubSettings

    assert not sdk_receive(), "EHINGEST_SDK_RECEIVE=1 reads with the SDK's receive"
    modes = args.modes.split(",")
    n = args.events
    figures: dict[str, list[float]] = {m: [] for m in modes}
    with emulator_process({"cpu1": 1}) as conn:
        settings = EventHubSettings(eventhub_name="cpu1", connection_string=conn)
        if args.properties:
            send_with_properties(settings, n, args.size, args.properties)
        else:
            send(settings, ["0"], n, args.size)
        rng = PartitionRange("0", 0, n - 1)
        set_mode("native")  # warm up: imports, the native step, first connection
        sum(b.num_rows for b in read_range(settings, PartitionRange("0", 0, 999)))
        for r in range(args.rounds):
            for mode in modes[r % len(modes) :] + modes[: r % len(modes)]:
                set_mode(mode)
                wall, cpu = time.perf_counter(), time.process_time()
                got = sum(b.num_rows for b in read_range(settings, rng, prefetch=args.prefetch))
                cpu = time.process_time() - cpu
                wall = time.perf_counter() - wall
                assert got == n, got
                figures[mode].append(cpu / n * 1e6)
                print(
                    f"round {r + 1} {mode:<9} cpu {cpu:6.2f} s = {cpu / n * 1e6:5.1f} us/event, "
                    f"wall {wall:6.2f} s ({n / wall:,.0f} ev/s)",
                    flush=True,
                )
    with_props = f", {args.properties} properties each" if args.properties else ""
    print(f"== us of CPU per event of read_range, {n:,} events of {args.size} B{with_props}")
    for mode, values in figures.items():
        shown = " ".join(f"{v:5.1f}" for v in values)
        print(f"  {mode:<9} median {statistics.median(values):5.1f}  ({shown})")
        rep.add(
            f"{mode} CPU us per event",
            {
                "median": round(statistics.median(values), 2),
                "rounds": [round(v, 2) for v in values],
            },
        )
    if "python" in figures and "native" in figures:
        ratio = statistics.median(figures["python"]) / statistics.median(figures["native"])
        print(f"  python / native: {ratio:.2f}")
        rep.add("python / native CPU", round(ratio, 2))


if __name__ == "__main__":
    main()
