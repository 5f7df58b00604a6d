"""CPU per event of ``read_range`` alone (the fast pull), with and without each pyamqp cut.

The cuts (``resources/spark_source/_amqp.py``): ``sock``, pyamqp's socket reads served from a
buffer; ``dec``, the faster AMQP payload decoder; ``frame``, the faster performative decoder;
``xfer`` (mode ``all``, with the three), transfer frames taken inline, past pyamqp's dispatch;
``native`` (with all four), runs of plain transfers laid out as Arrow columns by the compiled
step (``resources/spark_source/_native.py``; built first if this host has no copy).
The emulator runs in its own process (``python -m dagster_eventhub_ingest.emulator serve``); this
process reads the same range once per mode, round after round, each round starting one mode later
(the machine is shared: alternating spreads its noise over every mode), and prints the
``time.process_time()`` per event of each read and each mode's median. Run:

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

from source_throughput import emulator_process, send  # noqa: E402

MODES = {
    "none": (),
    "sock": ("sock",),
    "dec": ("dec",),
    "sock+dec": ("sock", "dec"),
    "sock+dec+frame": ("sock", "dec", "frame"),
    "all": ("sock", "dec", "frame", "xfer"),
    "native": ("sock", "dec", "frame", "xfer", "native"),
}


def _no_buffering(_handler: Any) -> bool:
    return False


def _no_inline_transfers(_handler: Any, _consumer: Any, **_kw: Any) -> bool:
    return False


def set_cuts(cuts: tuple[str, ...]) -> None:
    """Turn the cuts on or off for the next read_range (the pull installs them as it runs)."""
    from azure.eventhub._pyamqp import _decode, _transport, receiver

    from dagster_eventhub_ingest.resources.spark_source import _amqp, _receiver

    wanted = _amqp.buffer_reads if "sock" in cuts else _no_buffering
    vars(_receiver)["buffer_reads"] = wanted  # the names the pull calls
    inline = _amqp.fast_transfers if "xfer" in cuts else _no_inline_transfers
    vars(_receiver)["fast_transfers"] = inline
    _amqp._decoder_installed = True  # the pull's install_decoder() leaves this choice alone
    receiver.decode_payload = _amqp.decode_payload if "dec" in cuts else _decode.decode_payload
    _transport.decode_frame = _amqp.decode_frame if "frame" in cuts else _decode.decode_frame
    from dagster_eventhub_ingest.resources.spark_source import _native

    os.environ[_native.NATIVE_ENV] = "1" if "native" in cuts else "0"
    _native.reset_for_tests()


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
    parser.add_argument("--modes", default=",".join(MODES), help=f"of {', '.join(MODES)}")
    parser.add_argument(
        "--properties",
        type=int,
        default=0,
        help="application properties per event (and a message id and content type), as "
        "IoT Hub routes events; 0: plain events",
    )
    args = parser.parse_args()

    from dagster_eventhub_ingest.resources.settings import EventHubSettings
    from dagster_eventhub_ingest.resources.spark_source import PartitionRange, read_range
    from dagster_eventhub_ingest.resources.spark_source._receiver import partition_pull_available

    assert partition_pull_available(), "the fast pull is off (EHINGEST_SDK_RECEIVE=1?)"
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
        set_cuts(MODES["all"])  # warm up: imports, first connection
        sum(b.num_rows for b in read_range(settings, PartitionRange("0", 0, 999)))
        for r in range(args.rounds):
            for mode in modes[r % len(modes) :] + modes[: r % len(modes)]:
                set_cuts(MODES[mode])
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


if __name__ == "__main__":
    main()
